// Package torchsnap reads PyTorch memory snapshots: the pickles that
// torch.cuda.memory._dump_snapshot writes. Importing it makes trace.Open
// and trace.NewReader read them (it registers its reader with
// trace.RegisterReader); it is a package of its own so that programs that
// only use package trace's CSV formats, the mr logging adaptor among
// them, do not link a pickle decoder.
//
// torch.cuda.memory._dump_snapshot pickles the dictionary that
// torch.cuda.memory._snapshot returns:
//
//	{"segments": [Segment...], "device_traces": [[TraceEntry...] per device],
//	 "allocator_settings": {...}}
//	TraceEntry: {"action": str, "addr": int, "size": int, "stream": int,
//	             "time_us": int, "frames": [...], ...}
//	Segment:    {"device": int, "address": int, "stream": int,
//	             "blocks": [{"address": int, "size": int, "requested_size": int,
//	                         "state": "active_allocated" | "active_pending_free" | "inactive"}]}
//
// The trace entries record what the caching allocator did, in order. We
// replay what the program asked of it, so the actions map to trace.Op
// values as follows:
//
//	alloc           -> Alloc  (addr, size, stream)
//	free_completed  -> Free   (the block is back in the allocator: the end
//	                           of its life as memory_viz draws it)
//	free_requested  -> Free only in a trace that has no free_completed at
//	                   all (else ignored: it is followed by free_completed,
//	                   later if the block was in use on other streams)
//	free            -> Free   (the name PyTorch 1.13 used)
//	oom             -> AllocFailure (size, stream; the pointer is 0)
//	segment_alloc, segment_free, segment_map, segment_unmap, snapshot,
//	annotate, and actions unknown to this reader -> skipped: they describe
//	the caching allocator's own cudaMalloc traffic and metadata, which the
//	replayed resource replaces. Unknown actions are skipped rather than
//	refused so that snapshots of newer PyTorch versions still replay.
//
// PyTorch's history is a ring of max_entries entries, so a trace usually
// starts in the middle of the program: blocks allocated before it began
// are freed without ever being allocated. As memory_viz does, the reader
// emits a synthetic Alloc at the start for every address whose first
// event is a free, and for every block the snapshot's segments hold as
// active whose address never appears in the trace (it was live through
// the whole window). Synthetic events have Line 0.
//
// A pickle cannot be streamed (its root object is complete only at the
// STOP opcode), so the file is read whole and decoded with
// internal/pickle, which never executes code from the pickle (an opcode
// that would import a name or construct an object stops it), keeps an
// object the pickle references twice one Go value (PyTorch's snapshots
// share their lists of frames that way), and allocates no more than the
// pickle's bytes justify. The events are then copied into a slice of
// Events, the allocations' frames into a table of distinct stacks
// (frames.go), and the decoded tree is dropped before the first Next.
// Decoding costs time and memory in proportion to the pickle's size: the
// decoder refuses decimal integers longer than Python reads (4300
// digits), and the build refuses a tree that repeated references expand
// beyond trace.Options.MaxExpansion (expansion.go).

package torchsnap

import (
	"errors"
	"fmt"
	"io"

	"github.com/streamalloc/streamalloc/internal/unpickle"
	"github.com/streamalloc/streamalloc/trace"
)

func init() {
	trace.RegisterReader(trace.FormatSnapshot, func(r io.Reader, name string, o *trace.Options) (trace.Reader, error) {
		sr, err := NewReader(r, name, o)
		if err != nil {
			return nil, err
		}
		return sr, nil
	})
}

// Reader reads the allocation events of a PyTorch memory snapshot: a
// trace.Reader and a trace.Progresser. Create one with NewReader, or with
// trace.Open.
type Reader struct {
	name   string
	events []trace.Event
	next   int
	// Skipped counts trace entries that map to no event (segment
	// traffic, snapshots, annotations, unknown actions, and the
	// free_requested entries of a trace that has free_completed).
	Skipped int
	// Preexisting counts the synthetic allocations of blocks that were
	// live before the recorded history began.
	Preexisting int
	stacks      snapshotStacks // allocation stacks (frames.go)
	// budget is what is left of the trace entries and segment blocks the
	// build may still visit (expansion.go), out of initial, for a pickle
	// of size bytes at perKiB units per KiB.
	budget, initial, size int64
	perKiB                int
}

// NewReader decodes the pickled snapshot in r. name is used in errors
// and reports; o may be nil. Bad input is a *trace.ParseError.
func NewReader(r io.Reader, name string, o *trace.Options) (*Reader, error) {
	if o == nil {
		o = &trace.Options{}
	}
	// Read to the end, ignoring anything after the STOP opcode as Python
	// does, so that a gzip layer below checks its trailer: a truncated or
	// corrupt compressed snapshot must not pass.
	data, err := io.ReadAll(r)
	if err != nil {
		var pe *trace.ParseError
		if errors.As(err, &pe) { // the gzip layer below failed
			return nil, pe
		}
		return nil, &trace.ParseError{File: name,
			Msg: fmt.Sprintf("unreadable pickle (reading stopped after byte %d): %v", len(data), err),
			Err: errors.Join(trace.ErrPickle, err)}
	}
	// A pickle has no lines: a bad one is placed by the bytes the
	// decoder had consumed when it stopped.
	root, consumed, err := unpickle.Decode(data, nil)
	data = nil
	if err != nil {
		return nil, &trace.ParseError{File: name,
			Msg: fmt.Sprintf("unreadable pickle (decoding stopped after byte %d): %v", consumed, err),
			Err: errors.Join(trace.ErrPickle, err)}
	}
	sr := &Reader{name: name}
	sr.perKiB = o.MaxExpansion
	if sr.perKiB <= 0 {
		sr.perKiB = trace.DefaultMaxExpansion
	}
	sr.size = consumed
	sr.budget = expansionBudget(consumed, sr.perKiB)
	sr.initial = sr.budget
	if err := sr.build(root, o); err != nil {
		return nil, err
	}
	return sr, nil
}

// Name returns the snapshot's name.
func (sr *Reader) Name() string { return sr.name }

// Next returns the next event, or io.EOF after the last.
func (sr *Reader) Next() (trace.Event, error) {
	if sr.next >= len(sr.events) {
		return trace.Event{}, io.EOF
	}
	ev := sr.events[sr.next]
	sr.next++
	return ev, nil
}

// Rewind starts the events again from the first (a trace.Rewinder): the
// snapshot is decoded once however many times it is replayed.
func (sr *Reader) Rewind() error {
	sr.next = 0
	return nil
}

// Len is the number of events in the snapshot.
func (sr *Reader) Len() int { return len(sr.events) }

// Progress reports events returned out of events.
func (sr *Reader) Progress() (done, total int64) {
	return int64(sr.next), int64(len(sr.events))
}

func (sr *Reader) errorf(line int64, format string, args ...any) error {
	return &trace.ParseError{File: sr.name, Line: line, Msg: fmt.Sprintf(format, args...), Err: trace.ErrSnapshot}
}
