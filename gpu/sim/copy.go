// Sets and copies, and the execution of every operation that touches
// device memory.
//
// The host checks at enqueue time that the range is mapped (the driver
// rejects a bad pointer with CUDA_ERROR_INVALID_VALUE) and copies the
// source of a host-to-device copy, which the caller may reuse at once. The
// worker checks again when it runs the operation: memory unmapped in
// between is an illegal address, a sticky error of the stream.
//
// Bytes move with copy(), which the race detector sees as range accesses,
// so a missing ordering between two streams is reported on the bytes.

package sim

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

// enqueueMem validates and enqueues a memory operation.
// host is the caller's host memory of a copy (nil for others), which a
// captured copy keeps.
func (d *Device) enqueueMem(op Op, o *op, gs gpu.Stream, host []byte, ranges ...memRange) error {
	s, err := d.stream(o.name, gs)
	if err != nil {
		return err
	}
	if err := d.injectNamed(op, o.name); err != nil {
		return err
	}
	if o.n < 0 {
		return driverErrf(o.name, gpu.ErrInvalidValue, "negative size %d", o.n)
	}
	if o.n == 0 {
		return nil
	}
	for _, r := range ranges {
		if !d.mapped(r.p, o.n) {
			return driverErrf(o.name, gpu.ErrInvalidValue, "[%#x, +%d) is not inside one allocation of device %d", uint64(r.p), o.n, d.ordinal)
		}
	}
	if s.cs.capt.Load() != nil {
		return s.captureOp(o, host)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return wrap(o.name, gpu.ErrDestroyed)
	}
	s.enqueueLocked(o)
	return nil
}

type memRange struct{ p gpu.DevicePtr }

// MemsetD8Async sets n bytes at p to v.
func (d *Device) MemsetD8Async(p gpu.DevicePtr, v byte, n int, s gpu.Stream) error {
	o := &op{kind: opMemset, name: "cuMemsetD8Async", dst: p, val: v, n: n}
	return d.enqueueMem(OpMemset, o, s, nil, memRange{p})
}

// CopyHtoDAsync copies src to dst. src may be reused when it returns,
// unless it is page-locked (pinned_copy.go): then once the copy completed.
func (d *Device) CopyHtoDAsync(dst gpu.DevicePtr, src []byte, s gpu.Stream) error {
	o := &op{kind: opCopyHtoD, name: "cuMemcpyHtoDAsync", dst: dst, n: len(src)}
	if len(src) > 0 && d.mapped(dst, len(src)) {
		o.host = d.htodSource(src)
	}
	return d.enqueueMem(OpCopy, o, s, src, memRange{dst})
}

// CopyDtoHAsync copies len(dst) bytes at src into dst, which holds them
// once the stream is synchronized past the copy.
func (d *Device) CopyDtoHAsync(dst []byte, src gpu.DevicePtr, s gpu.Stream) error {
	o := &op{kind: opCopyDtoH, name: "cuMemcpyDtoHAsync", src: src, host: dst, n: len(dst)}
	return d.enqueueMem(OpCopy, o, s, dst, memRange{src})
}

// CopyDtoDAsync copies n bytes from src to dst.
func (d *Device) CopyDtoDAsync(dst, src gpu.DevicePtr, n int, s gpu.Stream) error {
	o := &op{kind: opCopyDtoD, name: "cuMemcpyDtoDAsync", dst: dst, src: src, n: n}
	return d.enqueueMem(OpCopy, o, s, nil, memRange{dst}, memRange{src})
}

// fill sets every byte of b to v with range writes.
func fill(b []byte, v byte) {
	if len(b) == 0 {
		return
	}
	b[0] = v
	for i := 1; i < len(b); i *= 2 {
		copy(b[i:], b[:i])
	}
}

// run executes a memory operation on the worker; the error becomes the
// stream's sticky error.
func (d *Device) run(o *op) (err error) {
	switch o.kind {
	case opMemset:
		return d.chunks(o.name, o.dst, o.n, func(_ int, b []byte) error {
			fill(b, o.val)
			return nil
		})
	case opCopyHtoD:
		return d.chunks(o.name, o.dst, o.n, func(off int, b []byte) error {
			copy(b, o.host[off:])
			return nil
		})
	case opCopyDtoH:
		return d.chunks(o.name, o.src, o.n, func(off int, b []byte) error {
			copy(o.host[off:], b)
			return nil
		})
	case opCopyDtoD:
		if !d.mapped(o.src, o.n) {
			return driverErrf(o.name, gpu.ErrIllegalAddress, "source [%#x, +%d) is not inside one allocation", uint64(o.src), o.n)
		}
		return d.chunks(o.name, o.dst, o.n, func(off int, b []byte) error {
			return d.chunks(o.name, o.src+gpu.DevicePtr(off), len(b), func(off2 int, sb []byte) error {
				copy(b[off2:], sb)
				return nil
			})
		})
	case opLaunch:
		return d.runKernel(o)
	case opPrefetch:
		return d.runPrefetch(o)
	}
	return fmt.Errorf("sim: unknown operation kind %d", o.kind)
}
