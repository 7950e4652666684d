// Block-use tracking: the last write and the reads since, as marks (a
// stream and an event recorded on it after the use), and the prepare and
// finish steps around a use. See the package comment for the rules.
//
// A buffer used in a capture keeps a second state of the same kind for
// that capture (capture.go); prepare and finish pick the one of the
// stream they are given.
//
// Invariants (all under Buffer.mu):
//   - lastWrite.s is nil after release, or once the use it stood for is
//     known complete; reads holds at most one mark per stream (by ID), none
//     on a nil stream.
//   - A mark whose event is nil is lazy: it stands for everything its
//     stream had enqueued when the event is finally recorded, which is
//     never earlier than the use it stands for. Waiting on a lazy mark
//     records it first and keeps the event in the slot.
//   - Every non-nil event in the state is owned by exactly one slot and
//     goes back to the cache when that slot is overwritten or released.

package buf

import (
	"errors"
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

type mark struct {
	s gpu.Stream
	e gpu.Event
}

type tracking struct {
	lastWrite mark
	reads     []mark
}

// allocated resets the state to "written on s by the allocation", lazily.
func (t *tracking) allocated(s gpu.Stream) {
	t.lastWrite = mark{s: s}
	t.reads = t.reads[:0]
}

// release hands every event back and empties the state.
func (t *tracking) release(c *gpu.EventCache) {
	c.Put(t.lastWrite.e)
	t.lastWrite = mark{}
	for i := range t.reads {
		c.Put(t.reads[i].e)
		t.reads[i] = mark{}
	}
	t.reads = t.reads[:0]
}

// waitOn makes s wait on the use m stands for; b.mu is held. A lazy mark
// is recorded first (and keeps its event). If m's stream was destroyed,
// no event can be recorded on it any more, and the device is synchronized
// instead: the only way left to be ordered after its work. A lazy mark on
// a stream of another capture than s's (or of a capture, s being outside
// any) cannot be recorded without joining the two, and is refused with
// mr.ErrStreamCapturing; so is the device synchronization while a capture
// of the device runs (the driver would invalidate it).
func (b *core) waitOn(m *mark, s gpu.Stream) error {
	if m.s == nil || m.s.ID() == s.ID() {
		return nil
	}
	if m.e == nil {
		if mc, sc := gpu.CaptureID(m.s), gpu.CaptureID(s); mc != sc {
			return fmt.Errorf("order stream %d (capture %d) after the work enqueued on stream %d (capture %d): %w",
				s.ID(), sc, m.s.ID(), mc, mr.ErrStreamCapturing)
		}
		e, err := b.events.Get()
		if err != nil {
			return fmt.Errorf("order stream %d after stream %d: %w", s.ID(), m.s.ID(), err)
		}
		if err := e.Record(m.s); err != nil {
			b.events.Put(e)
			if errors.Is(err, gpu.ErrDestroyed) {
				if gpu.DeviceCapturing(b.dev) {
					return fmt.Errorf("order stream %d after destroyed stream %d: synchronizing the device would invalidate its capture: %w",
						s.ID(), m.s.ID(), mr.ErrStreamCapturing)
				}
				if err := b.dev.Synchronize(); err != nil {
					return fmt.Errorf("synchronize after destroyed stream %d: %w", m.s.ID(), err)
				}
				// Everything m stood for has completed.
				*m = mark{}
				return nil
			}
			return fmt.Errorf("record event on stream %d: %w", m.s.ID(), err)
		}
		if b.obs != nil {
			b.obs.ObserveRecord(e, m.s)
		}
		m.e = e
	}
	if err := s.WaitEvent(m.e); err != nil {
		return fmt.Errorf("stream %d wait on stream %d: %w", s.ID(), m.s.ID(), err)
	}
	if b.obs != nil {
		b.obs.ObserveWait(s, m.e)
	}
	return nil
}

// waitAll makes s wait on the last write and every read of the buffer's
// tracking outside captures: what a write, or a free, must come after.
func (b *core) waitAll(s gpu.Stream) error {
	if b.untracked {
		return nil
	}
	return b.waitAllIn(&b.track, s)
}

// waitAllIn makes s wait on the last write and every read of t.
func (b *core) waitAllIn(t *tracking, s gpu.Stream) error {
	if err := b.waitOn(&t.lastWrite, s); err != nil {
		return err
	}
	reads := t.reads
	for i := range reads {
		if err := b.waitOn(&reads[i], s); err != nil {
			return err
		}
	}
	// A mark whose stream was destroyed is emptied by waitOn once the
	// device is synchronized; drop it so every read names a stream.
	kept := reads[:0]
	for _, m := range reads {
		if m.s != nil {
			kept = append(kept, m)
		}
	}
	clear(reads[len(kept):])
	t.reads = kept
	return nil
}

// prepare orders s for a use with access a of size bytes at p and reports
// the use to the observer; b.mu is held, s and a are valid. On a capturing
// stream the waits are those of the buffer's tracking inside the capture
// (capture.go).
func (b *core) prepare(s gpu.Stream, a Access, p gpu.DevicePtr, size int) error {
	if !b.untracked {
		t, err := b.trackingOn(s)
		if err != nil {
			return err
		}
		if a.Writes() {
			err = b.waitAllIn(t, s)
		} else {
			err = b.waitOn(&t.lastWrite, s)
		}
		if err != nil {
			return err
		}
	}
	if b.obs != nil {
		if err := b.obs.ObserveUse(p, size, s, a); err != nil {
			return err
		}
	}
	return nil
}

// finish records the use on s with access a; b.mu is held. It cannot
// fail: if no event can be had or recorded, the slot gets a lazy mark,
// which orders later waiters at least as strongly. On a capturing stream
// whose capture has no tracking of the buffer (Finish without Prepare,
// in a capture not begun with mr.BeginCapture) nothing is recorded;
// finishGen reports that case before calling.
func (b *core) finish(s gpu.Stream, a Access) {
	if b.untracked {
		return
	}
	if gpu.CaptureID(s) != 0 {
		g, err := b.graphUseOn(s)
		if err != nil {
			return
		}
		g.access |= a
		b.finishIn(&g.local, s, a)
		return
	}
	b.finishIn(&b.track, s, a)
}

// finishIn records the use on s with access a in t.
func (b *core) finishIn(t *tracking, s gpu.Stream, a Access) {
	if a.Writes() {
		// Reuse the last write's event when it is on the same stream:
		// re-recording moves it, and no slot but this one holds it.
		var e gpu.Event
		if t.lastWrite.s != nil && t.lastWrite.s.ID() == s.ID() {
			e, t.lastWrite.e = t.lastWrite.e, nil
		}
		for i := range t.reads {
			if e == nil && t.reads[i].s.ID() == s.ID() {
				e = t.reads[i].e
			} else {
				b.events.Put(t.reads[i].e)
			}
			t.reads[i] = mark{}
		}
		t.reads = t.reads[:0]
		b.events.Put(t.lastWrite.e)
		t.lastWrite = b.record(s, e)
		return
	}
	for i := range t.reads {
		if t.reads[i].s.ID() == s.ID() {
			t.reads[i] = b.record(s, t.reads[i].e)
			return
		}
	}
	t.reads = append(t.reads, b.record(s, nil))
}

// record records e (or a cached event if e is nil) on s and returns the
// mark; on failure the event goes back and the mark is lazy.
func (b *core) record(s gpu.Stream, e gpu.Event) mark {
	if e == nil {
		var err error
		if e, err = b.events.Get(); err != nil {
			return mark{s: s}
		}
	}
	if err := e.Record(s); err != nil {
		// The event's state is unknown after a failed record; do not
		// recycle it.
		e.Destroy()
		return mark{s: s}
	}
	if b.obs != nil {
		b.obs.ObserveRecord(e, s)
	}
	return mark{s: s, e: e}
}

// Prepare orders stream s for a use of the buffer with access a: a read
// waits on the last write, a write on the last write and every read since
// (waits on s itself are skipped). The use is reported to the observer,
// which may refuse it. Call Finish after enqueueing the use; Use does both.
func (b *Buffer) Prepare(s gpu.Stream, a Access) error { return b.prepareGen(0, s, a) }

func (b *Buffer) prepareGen(gen uint64, s gpu.Stream, a Access) error {
	sn, err := b.lock(gen)
	if err != nil {
		return fmt.Errorf("buf: prepare: %w", err)
	}
	defer b.mu.Unlock()
	if err := b.checkUse(s, a); err != nil {
		return fmt.Errorf("buf: prepare: %w", err)
	}
	if err := b.prepare(s, a, sn.ptr, sn.size); err != nil {
		return fmt.Errorf("buf: prepare %s on stream %d: %w", a, s.ID(), err)
	}
	return nil
}

// Finish records a use of the buffer with access a just enqueued on s: an
// event is recorded on s; a write replaces the last write and clears the
// reads, a read replaces s's read.
func (b *Buffer) Finish(s gpu.Stream, a Access) error { return b.finishGen(0, s, a) }

func (b *Buffer) finishGen(gen uint64, s gpu.Stream, a Access) error {
	if _, err := b.lock(gen); err != nil {
		return fmt.Errorf("buf: finish: %w", err)
	}
	defer b.mu.Unlock()
	if err := b.checkUse(s, a); err != nil {
		return fmt.Errorf("buf: finish: %w", err)
	}
	if !b.untracked && gpu.CaptureID(s) != 0 {
		if _, err := b.graphUseOn(s); err != nil {
			return fmt.Errorf("buf: finish %s on stream %d: %w", a, s.ID(), err)
		}
	}
	b.finish(s, a)
	return nil
}

// Use runs fn, which enqueues a use of the buffer with access a on s,
// between Prepare and Finish, with the buffer locked so that uses from
// other goroutines are ordered around it. fn may call Ptr, Size, Stream and
// Generation of this buffer, and any method of other buffers, but no other
// method of this one (it would deadlock). If the observer refuses the use,
// fn is not called. The use is recorded even if fn fails, since fn may
// have enqueued work before failing.
func (b *Buffer) Use(s gpu.Stream, a Access, fn func() error) error {
	return b.useGen(0, s, a, fn)
}

func (b *Buffer) useGen(gen uint64, s gpu.Stream, a Access, fn func() error) error {
	sn, err := b.lock(gen)
	if err != nil {
		return fmt.Errorf("buf: use: %w", err)
	}
	defer b.mu.Unlock()
	if err := b.checkUse(s, a); err != nil {
		return fmt.Errorf("buf: use: %w", err)
	}
	if fn == nil {
		return fmt.Errorf("buf: use: nil function: %w", gpu.ErrInvalidValue)
	}
	if err := b.prepare(s, a, sn.ptr, sn.size); err != nil {
		return fmt.Errorf("buf: use %s on stream %d: %w", a, s.ID(), err)
	}
	err = fn()
	b.finish(s, a)
	return err
}

func (b *Buffer) checkUse(s gpu.Stream, a Access) error {
	if !a.valid() {
		return fmt.Errorf("%v: %w", a, ErrAccess)
	}
	return checkStream(b.dev, s)
}
