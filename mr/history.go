// History: an adaptor that records a bounded history of allocation events,
// each with the Go call stack that made it, and writes it with the layout
// of the memory below as the snapshot PyTorch writes
// (torch.cuda.memory._dump_snapshot), so that PyTorch's memory_viz draws a
// Go program's GPU memory and the replay tools of this module read it
// back (history_snapshot.go writes it).
//
// What it records, as PyTorch's caching allocator does with
// _record_memory_history: an "alloc" event per allocation granted, a
// "free_requested" and a "free_completed" per free accepted (the free is
// enqueued in stream order; from the allocator's side the memory is back
// at once, which is what free_completed marks), and an "oom" event per
// request refused for lack of memory, with the device's free memory.
// Events go into a ring of Capacity entries: when it is full the oldest
// event is overwritten, so memory stays bounded however long the program
// runs (readers of a snapshot treat a block freed without a recorded
// allocation as live from the start, as they do for PyTorch's).
//
// Cost: runtime.Callers into an array on the stack, the stack interned as
// Tracking does (a hash and a lookup for a stack seen before), one lock
// for the ring. Symbols are resolved only when a snapshot is written.
//
// Invariants: every event in the ring was granted (alloc), accepted
// (frees) or refused for lack of memory (oom) by the upstream, in the
// order the upstream did it for each pointer: an alloc is recorded before
// the pointer can be freed, a free before it can be handed out again (the
// pointer table's lock orders them, ptrtable.go). Recorded counts every
// event ever recorded; the ring holds the last min(Recorded, Capacity).

package mr

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
)

// DefaultHistoryCapacity is the default HistoryOptions.Capacity, PyTorch's
// default number of entries.
const DefaultHistoryCapacity = 100_000

// HistoryOptions configure a History adaptor.
type HistoryOptions struct {
	// Capacity is the number of events kept; 0 means
	// DefaultHistoryCapacity.
	Capacity int
	// Depth is the number of frames recorded per event; 0 means 32, and
	// more than 64 is 64.
	Depth int
	// Skip drops that many more frames from the innermost end, for
	// callers that allocate through helpers of their own.
	Skip int
	// Now, if set, replaces time.Now for the events' times.
	Now func() time.Time
}

// HistoryAction is what a history event records.
type HistoryAction uint8

const (
	// HistoryAlloc: an allocation was granted.
	HistoryAlloc HistoryAction = iota
	// HistoryFreeRequested: a free was enqueued.
	HistoryFreeRequested
	// HistoryFreeCompleted: the freed memory is back in the resource.
	HistoryFreeCompleted
	// HistoryOOM: a request was refused for lack of memory.
	HistoryOOM
)

// String is the action's name in PyTorch's snapshots.
func (a HistoryAction) String() string {
	switch a {
	case HistoryAlloc:
		return "alloc"
	case HistoryFreeRequested:
		return "free_requested"
	case HistoryFreeCompleted:
		return "free_completed"
	case HistoryOOM:
		return "oom"
	}
	return fmt.Sprintf("HistoryAction(%d)", uint8(a))
}

// HistoryEvent is one recorded event.
type HistoryEvent struct {
	Action HistoryAction
	Addr   gpu.DevicePtr // 0 for oom
	Size   int
	Stream uint64 // the stream's ID
	Time   time.Time
	// Stack is the call stack of the allocation (for frees too: the
	// stack that allocated the memory), innermost first.
	Stack []uintptr
	// DeviceFree is the device's free memory at an oom, if known.
	DeviceFree uint64
}

// HistoryStats are a History adaptor's counts.
type HistoryStats struct {
	Recorded uint64 // events ever recorded
	Kept     int    // events in the ring now
	Capacity int
}

// historyEvent is a ring entry: HistoryEvent with the stack interned.
type historyEvent struct {
	action     HistoryAction
	addr       gpu.DevicePtr
	size       int
	stream     uint64
	time       int64 // Unix microseconds
	stack      *stackRecord
	deviceFree uint64
}

// historyLive is what History keeps per live allocation.
type historyLive struct {
	stack  *stackRecord
	stream uint64
}

// History records allocation events for snapshots in PyTorch's format. It
// is safe for concurrent use.
type History struct {
	passThrough
	dev    gpu.Device
	depth  int
	skip   int
	now    func() time.Time
	live   ptrTable[gpu.DevicePtr, historyLive]
	stacks stackTable

	mu       sync.Mutex
	ring     []historyEvent
	head     int // index of the oldest event once the ring is full
	recorded uint64
}

// NewHistory returns a History adaptor over upstream.
func NewHistory(upstream Resource, opts HistoryOptions) *History {
	c := opts.Capacity
	if c <= 0 {
		c = DefaultHistoryCapacity
	}
	d := opts.Depth
	if d <= 0 {
		d = 32
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &History{passThrough: passThrough{upstream}, dev: upstream.Device(), depth: min(d, maxStackDepth),
		skip: max(opts.Skip, 0), now: now, ring: make([]historyEvent, 0, c)}
}

// record appends e to the ring, over the oldest event when it is full.
func (h *History) record(e historyEvent) {
	e.time = h.now().UnixMicro()
	h.mu.Lock()
	if len(h.ring) < cap(h.ring) {
		h.ring = append(h.ring, e)
	} else {
		h.ring[h.head] = e
		h.head = (h.head + 1) % len(h.ring)
	}
	h.recorded++
	h.mu.Unlock()
}

// Allocate allocates from the upstream and records the allocation, or
// the refusal for lack of memory, with the caller's stack.
func (h *History) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	if zero, err := checkAlloc("history", h.dev, size, s); zero || err != nil {
		return 0, err
	}
	var buf [maxStackDepth]uintptr
	n := runtime.Callers(2+h.skip, buf[:h.depth]) // skip Callers and Allocate
	p, err := h.up.Allocate(size, s)
	if err != nil {
		if errors.Is(err, ErrOutOfMemory) {
			e := historyEvent{action: HistoryOOM, size: size, stream: s.ID(), stack: h.stacks.intern(buf[:n], nil)}
			if !gpu.DeviceCapturing(h.dev) {
				e.deviceFree, _, _ = h.dev.MemGetInfo()
			}
			h.record(e)
		}
		return 0, fmt.Errorf("history: %w", err)
	}
	st := h.stacks.intern(buf[:n], nil)
	h.live.insert(p, size, historyLive{stack: st, stream: s.ID()}, func() {
		h.record(historyEvent{action: HistoryAlloc, addr: p, size: size, stream: s.ID(), stack: st})
	})
	return p, nil
}

// Deallocate frees p through the upstream and records the free. Bad frees
// are refused with typed errors before they reach the upstream.
func (h *History) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	if null, err := checkFree("history", h.dev, p, size, s); null || err != nil {
		return err
	}
	_, err := h.live.take(p, size, func(l historyLive) error {
		if err := h.up.Deallocate(p, size, s); err != nil {
			return err
		}
		h.record(historyEvent{action: HistoryFreeRequested, addr: p, size: size, stream: s.ID(), stack: l.stack})
		h.record(historyEvent{action: HistoryFreeCompleted, addr: p, size: size, stream: s.ID(), stack: l.stack})
		return nil
	})
	if err != nil {
		return fmt.Errorf("history: deallocate: %w", err)
	}
	return nil
}

// Device is the upstream's device.
func (h *History) Device() gpu.Device { return h.dev }

// Stats returns the adaptor's counts.
func (h *History) Stats() HistoryStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return HistoryStats{Recorded: h.recorded, Kept: len(h.ring), Capacity: cap(h.ring)}
}

// events returns the ring's events, oldest first.
func (h *History) events() []historyEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]historyEvent, 0, len(h.ring))
	out = append(out, h.ring[h.head:]...)
	return append(out, h.ring[:h.head]...)
}

// Events returns the recorded events, oldest first.
func (h *History) Events() []HistoryEvent {
	evs := h.events()
	out := make([]HistoryEvent, len(evs))
	for i, e := range evs {
		out[i] = HistoryEvent{Action: e.action, Addr: e.addr, Size: e.size, Stream: e.stream,
			Time: time.UnixMicro(e.time), DeviceFree: e.deviceFree}
		if e.stack != nil {
			out[i].Stack = e.stack.pcs
		}
	}
	return out
}

// Clear forgets the recorded events (not the live allocations, whose
// stacks the snapshot's blocks still show), as PyTorch's
// _record_memory_history(None) followed by a new start does.
func (h *History) Clear() {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.ring)
	h.ring = h.ring[:0]
	h.head = 0
}

// String is "history: 1200 events recorded, 1200 kept (ring of 100000)".
func (h *History) String() string {
	st := h.Stats()
	return fmt.Sprintf("history: %s recorded, %d kept (ring of %d)", plural(st.Recorded, "event", "events"), st.Kept, st.Capacity)
}
