// Copies between buffers and page-locked staging memory from an
// mr.HostPool.
//
// A copy from or to page-locked memory is a DMA that touches the host
// slice when the stream reaches it, not when the call returns. The copy is
// a tracked use of the buffer, like CopyFromHost, and the buffer's stream
// is recorded with the pool as a user of the slice (HostPool.RecordStream)
// before the copy is enqueued: whatever stream the slice is later freed
// on, the pool hands its block out again only after the copy. A slice the
// pool did not hand out is refused before anything is enqueued.

package buf

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// CopyFromPinned copies src, a live slice of pool exactly Size() bytes
// long, into the buffer on its stream. The host must not write src until
// the copy has completed (a synchronization of the buffer's stream, or of
// an event recorded after it); pool reuses src's block only after the
// copy, whatever stream src is freed on. A slice pool did not hand out (or
// part of one) matches mr.ErrUnknownPointer (mr.ErrSubSlice), a pool of
// another device gpu.ErrWrongDevice; then nothing is copied.
func (b *Buffer) CopyFromPinned(src []byte, pool *mr.HostPool) error {
	return b.pinnedOp("copy from pinned", src, pool, Write,
		func(p gpu.DevicePtr, s gpu.Stream) error { return b.dev.CopyHtoDAsync(p, src, s) })
}

// CopyToPinned copies the buffer into dst, a live slice of pool exactly
// Size() bytes long, on the buffer's stream. dst holds the bytes once the
// stream has been synchronized past the copy; until then the host must
// not touch it. The errors are CopyFromPinned's.
func (b *Buffer) CopyToPinned(dst []byte, pool *mr.HostPool) error {
	return b.pinnedOp("copy to pinned", dst, pool, Read,
		func(p gpu.DevicePtr, s gpu.Stream) error { return b.dev.CopyDtoHAsync(dst, p, s) })
}

func (b *Buffer) pinnedOp(op string, host []byte, pool *mr.HostPool, a Access,
	do func(p gpu.DevicePtr, s gpu.Stream) error) error {
	if pool == nil {
		return fmt.Errorf("buf: %s: nil pool: %w", op, gpu.ErrInvalidHandle)
	}
	return b.hostOp(0, op, 0, len(host), true, a, func(p gpu.DevicePtr, _ int, s gpu.Stream) error {
		if err := pool.RecordStream(host, s); err != nil {
			return err
		}
		return do(p, s)
	})
}
