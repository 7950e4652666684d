// Ref: a non-owning handle that carries the generation it was taken at.
//
// Refs exist so that code which borrows a buffer (a kernel wrapper, a
// queue of pending work) cannot act on memory that was freed and handed
// out again: once the owner closes or resizes the buffer, the generation
// no longer matches and every operation through the Ref returns
// ErrUseAfterFree without enqueueing anything. The check is made under the
// buffer's lock, so it cannot race with Close. A Ref holds the handle, so
// while one is reachable the garbage collector's cleanup does not close the
// buffer: the memory stays allocated until the owner closes it.

package buf

import "github.com/streamalloc/streamalloc/gpu"

// Ref is a borrowed reference to one allocation of a Buffer. The zero Ref
// refers to nothing (its operations return ErrNilBuffer). Refs are small
// values; copy them freely.
type Ref struct {
	b   *Buffer
	gen uint64
}

// Ref returns a reference to the buffer's current allocation. A Ref of a
// closed (or nil) buffer is stale from the start.
func (b *Buffer) Ref() Ref {
	if b == nil {
		return Ref{}
	}
	g := b.Generation()
	if g == 0 {
		// Closed: a generation no allocation has, so the Ref is stale.
		g = ^uint64(0)
	}
	return Ref{b: b, gen: g}
}

// Buffer is the buffer the Ref was taken from.
func (r Ref) Buffer() *Buffer { return r.b }

// Generation is the generation the Ref was taken at.
func (r Ref) Generation() uint64 { return r.gen }

// Err is nil while the Ref's allocation is live, ErrUseAfterFree once it
// is not, and ErrNilBuffer for the zero Ref.
func (r Ref) Err() error {
	if r.b == nil || r.b.core == nil {
		return ErrNilBuffer
	}
	if sn := r.b.cur.Load(); sn == nil || sn.gen != r.gen {
		return ErrUseAfterFree
	}
	return nil
}

// Ptr is the allocation's device address, or 0 if the Ref is stale. A
// pointer read here and used later is not protected: use it inside Use.
func (r Ref) Ptr() gpu.DevicePtr {
	if sn := r.b.snap(); sn != nil && sn.gen == r.gen {
		return sn.ptr
	}
	return 0
}

// Size is the allocation's size, or 0 if the Ref is stale.
func (r Ref) Size() int {
	if sn := r.b.snap(); sn != nil && sn.gen == r.gen {
		return sn.size
	}
	return 0
}

// Use is Buffer.Use through the Ref.
func (r Ref) Use(s gpu.Stream, a Access, fn func() error) error {
	return r.b.useGen(r.gen, s, a, fn)
}

// Prepare is Buffer.Prepare through the Ref.
func (r Ref) Prepare(s gpu.Stream, a Access) error { return r.b.prepareGen(r.gen, s, a) }

// Finish is Buffer.Finish through the Ref.
func (r Ref) Finish(s gpu.Stream, a Access) error { return r.b.finishGen(r.gen, s, a) }

// CopyFromHost is Buffer.CopyFromHost through the Ref.
func (r Ref) CopyFromHost(src []byte) error { return r.b.copyFromHost(r.gen, 0, src, true) }

// CopyFromHostAt is Buffer.CopyFromHostAt through the Ref.
func (r Ref) CopyFromHostAt(off int, src []byte) error {
	return r.b.copyFromHost(r.gen, off, src, false)
}

// CopyToHost is Buffer.CopyToHost through the Ref.
func (r Ref) CopyToHost(dst []byte) error { return r.b.copyToHost(r.gen, dst, 0, true) }

// CopyToHostAt is Buffer.CopyToHostAt through the Ref.
func (r Ref) CopyToHostAt(dst []byte, off int) error { return r.b.copyToHost(r.gen, dst, off, false) }

// Memset is Buffer.Memset through the Ref.
func (r Ref) Memset(v byte) error { return r.b.memset(r.gen, 0, -1, true, v) }

// CopyFrom copies all of src into the Ref's allocation, as Buffer.CopyFrom.
func (r Ref) CopyFrom(src Ref) error {
	return copyBuffers(r.b, r.gen, 0, src.b, src.gen, 0, -1)
}

// Operand is the Ref as an operand of UseAll with access a.
func (r Ref) Operand(a Access) Operand { return Operand{Buf: r.b, Access: a, gen: r.gen} }
