// UseAll: one tracked use of several buffers, as a kernel that reads some
// and writes others makes.
//
// The buffers are locked in creation order (their ids), so two UseAll
// calls over overlapping sets cannot deadlock, and each buffer appears
// once: operands naming one buffer twice are merged (their accesses
// joined).

package buf

import (
	"fmt"
	"slices"

	"github.com/streamalloc/streamalloc/gpu"
)

// Operand is one buffer of a UseAll and how the use touches it. Build it
// as Operand{Buf: b, Access: buf.Read}, or with Ref.Operand to check a
// generation too.
type Operand struct {
	Buf    *Buffer
	Access Access
	gen    uint64
}

// UseAll runs fn, which enqueues one use of every operand's buffer on s,
// between the Prepare and the Finish of each, with all of them locked. fn
// may call Ptr, Size and Stream of the operands but no other method of
// theirs. If any operand is nil, closed, stale or invalid, or an observer
// refuses a use, fn is not called.
func UseAll(s gpu.Stream, ops []Operand, fn func() error) error {
	if fn == nil {
		return fmt.Errorf("buf: use all: nil function: %w", gpu.ErrInvalidValue)
	}
	if s == nil {
		return fmt.Errorf("buf: use all: nil stream: %w", gpu.ErrInvalidHandle)
	}
	merged := make([]Operand, 0, len(ops))
	for i, op := range ops {
		if op.Buf.isNil() {
			// Before sorting by id, which a Buffer not made by New
			// does not have.
			return fmt.Errorf("buf: use all: operand %d: %w", i, ErrNilBuffer)
		}
		if !op.Access.valid() {
			return fmt.Errorf("buf: use all: operand %d: %v: %w", i, op.Access, ErrAccess)
		}
		merged = append(merged, op)
	}
	slices.SortFunc(merged, func(a, b Operand) int {
		switch {
		case a.Buf.id < b.Buf.id:
			return -1
		case a.Buf.id > b.Buf.id:
			return 1
		}
		return 0
	})
	out := merged[:0]
	for _, op := range merged {
		if n := len(out); n > 0 && out[n-1].Buf == op.Buf {
			last := &out[n-1]
			last.Access |= op.Access
			switch {
			case last.gen == 0:
				last.gen = op.gen
			case op.gen != 0 && op.gen != last.gen:
				return fmt.Errorf("buf: use all: two generations of one buffer: %w", ErrUseAfterFree)
			}
			continue
		}
		out = append(out, op)
	}
	merged = out

	snaps := make([]*snapshot, 0, len(merged))
	unlock := func() {
		for i := len(snaps) - 1; i >= 0; i-- {
			merged[i].Buf.mu.Unlock()
		}
	}
	for i, op := range merged {
		sn, err := op.Buf.lock(op.gen)
		if err != nil {
			unlock()
			return fmt.Errorf("buf: use all: operand %d: %w", i, err)
		}
		snaps = append(snaps, sn)
		if err := checkStream(op.Buf.dev, s); err != nil {
			unlock()
			return fmt.Errorf("buf: use all: operand %d: %w", i, err)
		}
	}
	defer unlock()
	for i, op := range merged {
		if err := op.Buf.prepare(s, op.Access, snaps[i].ptr, snaps[i].size); err != nil {
			return fmt.Errorf("buf: use all: %s on stream %d: %w", op.Access, s.ID(), err)
		}
	}
	err := fn()
	for _, op := range merged {
		op.Buf.finish(s, op.Access)
	}
	return err
}
