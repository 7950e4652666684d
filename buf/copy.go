// Copies between buffers and Go slices, and sets. Each is a tracked use on
// the buffer's stream (a copy between buffers on the destination's): the
// stream first waits as Prepare would, the operation is enqueued, and the
// use is recorded as Finish would. Ranges are checked before anything is
// enqueued, so a bad call writes nothing anywhere.

package buf

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

// checkRange reports whether [off, off+n) lies within size bytes, without
// overflowing.
func checkRange(off, n, size int) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return fmt.Errorf("%d bytes at offset %d of %d: %w", n, off, size, ErrOutOfRange)
	}
	return nil
}

// hostOp runs one tracked operation of n bytes at off on the buffer's
// stream. whole requires n to be the buffer's size; whole with n < 0 means
// the buffer's size, read under the lock.
func (b *Buffer) hostOp(gen uint64, op string, off, n int, whole bool, a Access,
	do func(p gpu.DevicePtr, n int, s gpu.Stream) error) error {
	sn, err := b.lock(gen)
	if err != nil {
		return fmt.Errorf("buf: %s: %w", op, err)
	}
	defer b.mu.Unlock()
	if whole && n < 0 {
		n = sn.size
	}
	if whole && n != sn.size {
		return fmt.Errorf("buf: %s: %d bytes for a buffer of %d: %w", op, n, sn.size, ErrLength)
	}
	if err := checkRange(off, n, sn.size); err != nil {
		return fmt.Errorf("buf: %s: %w", op, err)
	}
	if n == 0 {
		return nil
	}
	s := sn.stream
	p := sn.ptr + gpu.DevicePtr(off)
	if err := b.prepare(s, a, p, n); err != nil {
		return fmt.Errorf("buf: %s on stream %d: %w", op, s.ID(), err)
	}
	err = do(p, n, s)
	b.finish(s, a)
	if err != nil {
		return fmt.Errorf("buf: %s: %w", op, err)
	}
	return nil
}

// CopyFromHost copies src, which must be exactly Size() bytes long, into
// the buffer. src may be reused as soon as it returns.
func (b *Buffer) CopyFromHost(src []byte) error { return b.copyFromHost(0, 0, src, true) }

// CopyFromHostAt copies src into the buffer at byte offset off.
func (b *Buffer) CopyFromHostAt(off int, src []byte) error {
	return b.copyFromHost(0, off, src, false)
}

func (b *Buffer) copyFromHost(gen uint64, off int, src []byte, whole bool) error {
	return b.hostOp(gen, "copy from host", off, len(src), whole, Write,
		func(p gpu.DevicePtr, _ int, s gpu.Stream) error { return b.dev.CopyHtoDAsync(p, src, s) })
}

// CopyToHost copies the buffer into dst, which must be exactly Size()
// bytes long. dst holds the bytes once the buffer's stream has been
// synchronized past the copy; until then it must not be touched.
func (b *Buffer) CopyToHost(dst []byte) error { return b.copyToHost(0, dst, 0, true) }

// CopyToHostAt copies len(dst) bytes at byte offset off of the buffer into
// dst, as CopyToHost.
func (b *Buffer) CopyToHostAt(dst []byte, off int) error { return b.copyToHost(0, dst, off, false) }

func (b *Buffer) copyToHost(gen uint64, dst []byte, off int, whole bool) error {
	return b.hostOp(gen, "copy to host", off, len(dst), whole, Read,
		func(p gpu.DevicePtr, _ int, s gpu.Stream) error { return b.dev.CopyDtoHAsync(dst, p, s) })
}

// Memset sets every byte of the buffer to v.
func (b *Buffer) Memset(v byte) error { return b.memset(0, 0, -1, true, v) }

// MemsetAt sets n bytes at byte offset off to v.
func (b *Buffer) MemsetAt(off, n int, v byte) error { return b.memset(0, off, n, false, v) }

// memset with whole and n < 0 sets the whole buffer.

func (b *Buffer) memset(gen uint64, off, n int, whole bool, v byte) error {
	return b.hostOp(gen, "memset", off, n, whole, Write,
		func(p gpu.DevicePtr, n int, s gpu.Stream) error { return b.dev.MemsetD8Async(p, v, n, s) })
}

// CopyFrom copies all of src into b, which must be the same size, on b's
// stream.
func (b *Buffer) CopyFrom(src *Buffer) error {
	return copyBuffers(b, 0, 0, src, 0, 0, -1)
}

// Copy copies n bytes at srcOff of src to dstOff of dst, on dst's stream.
// dst and src may be the same buffer if the ranges do not overlap.
func Copy(dst *Buffer, dstOff int, src *Buffer, srcOff, n int) error {
	if n < 0 {
		return fmt.Errorf("buf: copy %d bytes: %w", n, ErrOutOfRange)
	}
	return copyBuffers(dst, 0, dstOff, src, 0, srcOff, n)
}

// copyBuffers is Copy for any generations; n < 0 means "whole buffers of
// equal size".
func copyBuffers(dst *Buffer, dgen uint64, dstOff int, src *Buffer, sgen uint64, srcOff, n int) error {
	// Checked before lock2, which orders the two by id: a Buffer not made
	// by New has no state to read one from.
	if dst.isNil() || src.isNil() {
		return fmt.Errorf("buf: copy: %w", ErrNilBuffer)
	}
	dsn, ssn, unlock, err := lock2(dst, dgen, src, sgen)
	if err != nil {
		return fmt.Errorf("buf: copy: %w", err)
	}
	defer unlock()
	if src.dev != dst.dev {
		return fmt.Errorf("buf: copy: source on device %d, destination on device %d: %w",
			src.dev.Ordinal(), dst.dev.Ordinal(), gpu.ErrWrongDevice)
	}
	if n < 0 {
		if ssn.size != dsn.size {
			return fmt.Errorf("buf: copy: source of %d bytes to destination of %d: %w",
				ssn.size, dsn.size, ErrLength)
		}
		n = dsn.size
	}
	if err := checkRange(srcOff, n, ssn.size); err != nil {
		return fmt.Errorf("buf: copy: source: %w", err)
	}
	if err := checkRange(dstOff, n, dsn.size); err != nil {
		return fmt.Errorf("buf: copy: destination: %w", err)
	}
	same := dst == src
	if same && n > 0 && srcOff < dstOff+n && dstOff < srcOff+n {
		return fmt.Errorf("buf: copy: %d bytes from offset %d to %d: %w", n, srcOff, dstOff, ErrOverlap)
	}
	if n == 0 {
		return nil
	}
	s := dsn.stream
	dp, sp := dsn.ptr+gpu.DevicePtr(dstOff), ssn.ptr+gpu.DevicePtr(srcOff)
	if same {
		// One buffer read and written: tracked as one read-write use
		// (a write waits on everything a read would).
		if err := dst.prepare(s, ReadWrite, dp, n); err != nil {
			return fmt.Errorf("buf: copy on stream %d: %w", s.ID(), err)
		}
		err = dst.dev.CopyDtoDAsync(dp, sp, n, s)
		dst.finish(s, ReadWrite)
	} else {
		if err := src.prepare(s, Read, sp, n); err != nil {
			return fmt.Errorf("buf: copy on stream %d: source: %w", s.ID(), err)
		}
		if err := dst.prepare(s, Write, dp, n); err != nil {
			return fmt.Errorf("buf: copy on stream %d: destination: %w", s.ID(), err)
		}
		err = dst.dev.CopyDtoDAsync(dp, sp, n, s)
		src.finish(s, Read)
		dst.finish(s, Write)
	}
	if err != nil {
		return fmt.Errorf("buf: copy: %w", err)
	}
	return nil
}

// lock2 locks two buffers (possibly the same one) in id order, so that
// concurrent copies in opposite directions cannot deadlock.
func lock2(a *Buffer, ga uint64, b *Buffer, gb uint64) (as, bs *snapshot, unlock func(), err error) {
	if a == b {
		// Two handles of one buffer: if both carry generations they must
		// agree, since at most one of them is live.
		g := ga
		if g == 0 {
			g = gb
		} else if gb != 0 && gb != g {
			return nil, nil, nil, ErrUseAfterFree
		}
		sn, err := a.lock(g)
		if err != nil {
			return nil, nil, nil, err
		}
		return sn, sn, a.mu.Unlock, nil
	}
	first, fg, second, sg := a, ga, b, gb
	if second.id < first.id {
		first, fg, second, sg = second, sg, first, fg
	}
	fs, err := first.lock(fg)
	if err != nil {
		return nil, nil, nil, err
	}
	ss, err := second.lock(sg)
	if err != nil {
		first.mu.Unlock()
		return nil, nil, nil, err
	}
	unlock = func() { second.mu.Unlock(); first.mu.Unlock() }
	if first == a {
		return fs, ss, unlock, nil
	}
	return ss, fs, unlock, nil
}
