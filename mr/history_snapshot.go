// The snapshot of a History adaptor, and its pickle in the layout of
// torch.cuda.memory._dump_snapshot, which PyTorch's memory_viz draws
// (trace_plot, segment_plot, segsum) and trace/torchsnap reads back:
//
//	{"segments": [{"device", "address", "total_size", "allocated_size",
//	               "active_size", "requested_size", "stream", "segment_type",
//	               "segment_pool_id", "is_expandable", "frames",
//	               "blocks": [{"address", "size", "requested_size",
//	                           "state", "frames"}]}],
//	 "device_traces": [[{"action", "addr", "size", "stream", "time_us",
//	                     "frames", ("device_free")}], ...one list per device],
//	 "allocator_settings": {}}
//
// Frames are {"filename", "line", "name"}, innermost first, as PyTorch
// writes them: the Go file, line and function (frames of package mr at
// the innermost end, adaptors above the History, left out). Streams are
// our stream IDs where PyTorch writes a cudaStream_t.
//
// Segments are the layout of the first Pool below the adaptor (its chunks,
// and their blocks: live ones "active_allocated", those freed on another
// stream and not yet absorbed "active_pending_free", free and cached ones
// "inactive"), or, with no Pool below, one segment per live allocation of
// the adaptor (what a resource without suballocation holds). A block live
// in the History carries the stack that allocated it.
//
// The pickle is written by internal/pickle, a writer of a dozen opcodes:
// package mr links no pickle decoder (deps_test.go).

package mr

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/internal/pickle"
)

// MemorySnapshot is what WriteSnapshot writes.
type MemorySnapshot struct {
	Device   int // the device's ordinal
	Segments []SnapshotSegment
	Events   []HistoryEvent // oldest first
}

// SnapshotSegment is one span of memory the resources below hold.
type SnapshotSegment struct {
	Address gpu.DevicePtr
	Size    int
	Stream  uint64
	Small   bool // a Pool's small chunk ("small" segment_type)
	Blocks  []SnapshotBlock
}

// SnapshotBlock is a block of a segment.
type SnapshotBlock struct {
	Address   gpu.DevicePtr
	Size      int
	Requested int // the size asked for (live blocks), else Size or 0
	State     BlockState
	Stack     []uintptr // the allocating stack, if the History saw it
}

// Snapshot returns the recorded events and the layout of the memory
// below, as the file comment describes.
func (h *History) Snapshot() MemorySnapshot {
	ms := MemorySnapshot{Device: h.dev.Ordinal(), Events: h.Events()}
	stackOf := func(p gpu.DevicePtr) []uintptr {
		if r, ok := h.live.lookup(p); ok && r.v.stack != nil {
			return r.v.stack.pcs
		}
		return nil
	}
	var pool *Pool
	for _, r := range Walk(h.up) {
		if p, ok := r.(*Pool); ok {
			pool = p
			break
		}
	}
	if pool != nil {
		for _, c := range pool.Layout().Chunks {
			seg := SnapshotSegment{Address: c.Base, Size: c.Size, Stream: c.Stream, Small: c.Small}
			for _, b := range c.Blocks {
				sb := SnapshotBlock{Address: b.Ptr, Size: b.Size, Requested: b.Requested, State: b.State}
				switch b.State {
				case BlockLive:
					sb.Stack = stackOf(b.Ptr)
				case BlockPending:
					sb.Requested = b.Size
				}
				seg.Blocks = append(seg.Blocks, sb)
			}
			ms.Segments = append(ms.Segments, seg)
		}
		return ms
	}
	h.live.each(func(p gpu.DevicePtr, size int, l historyLive) {
		var st []uintptr
		if l.stack != nil {
			st = l.stack.pcs
		}
		rounded := alignUp(size)
		ms.Segments = append(ms.Segments, SnapshotSegment{Address: p, Size: rounded, Stream: l.stream,
			Blocks: []SnapshotBlock{{Address: p, Size: rounded, Requested: size, State: BlockLive, Stack: st}}})
	})
	slices.SortFunc(ms.Segments, func(a, b SnapshotSegment) int { return compareUint64(uint64(a.Address), uint64(b.Address)) })
	return ms
}

// WriteSnapshot writes Snapshot to w as the pickle
// torch.cuda.memory._dump_snapshot writes.
func (h *History) WriteSnapshot(w io.Writer) error {
	if err := h.Snapshot().Write(w); err != nil {
		return fmt.Errorf("history: write snapshot: %w", err)
	}
	return nil
}

// DumpSnapshot writes the snapshot to the file at path, as
// torch.cuda.memory._dump_snapshot(path) does.
func (h *History) DumpSnapshot(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	err = h.WriteSnapshot(f)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("history: %w", cerr)
	}
	return err
}

// snapshotState is a block's state as PyTorch names it.
func snapshotState(s BlockState) string {
	switch s {
	case BlockLive:
		return "active_allocated"
	case BlockPending:
		return "active_pending_free"
	}
	return "inactive"
}

// Write writes s as the pickle torch.cuda.memory._dump_snapshot writes.
func (s MemorySnapshot) Write(w io.Writer) error {
	pw := pickle.NewWriter(w)
	fw := framesWriter{pw: pw}
	pw.DictStart()

	pw.String("segments")
	pw.ListStart()
	for _, seg := range s.Segments {
		var allocated, active, requested int
		for _, b := range seg.Blocks {
			switch b.State {
			case BlockLive:
				allocated += b.Size
				active += b.Size
				requested += b.Requested
			case BlockPending:
				active += b.Size
			}
		}
		pw.DictStart()
		pw.String("device")
		pw.Int(int64(s.Device))
		pw.String("address")
		pw.Uint(uint64(seg.Address))
		pw.String("total_size")
		pw.Int(int64(seg.Size))
		pw.String("allocated_size")
		pw.Int(int64(allocated))
		pw.String("active_size")
		pw.Int(int64(active))
		pw.String("requested_size")
		pw.Int(int64(requested))
		pw.String("stream")
		pw.Uint(seg.Stream)
		pw.String("segment_type")
		if seg.Small {
			pw.String("small")
		} else {
			pw.String("large")
		}
		pw.String("segment_pool_id")
		pw.TupleStart()
		pw.Int(0)
		pw.Int(0)
		pw.End()
		pw.String("is_expandable")
		pw.Bool(false)
		pw.String("frames")
		fw.write(nil)
		pw.String("blocks")
		pw.ListStart()
		for _, b := range seg.Blocks {
			pw.DictStart()
			pw.String("address")
			pw.Uint(uint64(b.Address))
			pw.String("size")
			pw.Int(int64(b.Size))
			pw.String("requested_size")
			pw.Int(int64(b.Requested))
			pw.String("state")
			pw.String(snapshotState(b.State))
			pw.String("frames")
			fw.write(b.Stack)
			pw.End()
		}
		pw.End()
		pw.End()
	}
	pw.End()

	pw.String("device_traces")
	pw.ListStart()
	for range s.Device {
		pw.ListStart()
		pw.End()
	}
	pw.ListStart()
	for _, e := range s.Events {
		pw.DictStart()
		pw.String("action")
		pw.String(e.Action.String())
		pw.String("addr")
		pw.Uint(uint64(e.Addr))
		pw.String("size")
		pw.Int(int64(e.Size))
		pw.String("stream")
		pw.Uint(e.Stream)
		pw.String("time_us")
		pw.Int(e.Time.UnixMicro())
		if e.Action == HistoryOOM {
			pw.String("device_free")
			pw.Uint(e.DeviceFree)
		}
		pw.String("frames")
		fw.write(e.Stack)
		pw.End()
	}
	pw.End()
	pw.End()

	pw.String("allocator_settings")
	pw.DictStart()
	pw.End()

	pw.End()
	return pw.Finish()
}

// framesWriter writes the frames of a stack as a list of frame dicts, each
// distinct stack once (later ones are memo references).
type framesWriter struct {
	pw *pickle.Writer
}

func (fw framesWriter) write(pcs []uintptr) {
	key := fmt.Sprint(pcs) // distinct stacks, distinct keys
	if fw.pw.Get(key) {
		return
	}
	fw.pw.ListStart()
	if len(pcs) > 0 {
		for _, f := range trimFrames(symbolize(pcs)) {
			fw.pw.DictStart()
			fw.pw.String("filename")
			fw.pw.String(f.File)
			fw.pw.String("line")
			fw.pw.Int(int64(f.Line))
			fw.pw.String("name")
			fw.pw.String(f.Function)
			fw.pw.End()
		}
	}
	fw.pw.End()
	fw.pw.Put(key)
}

// symbolize resolves pcs into frames, innermost first, without the
// runtime's goroutine entry.
func symbolize(pcs []uintptr) []runtime.Frame {
	var out []runtime.Frame
	fr := runtime.CallersFrames(pcs)
	for {
		f, more := fr.Next()
		if f.Function != "runtime.goexit" && f.Function != "" {
			out = append(out, f)
		}
		if !more {
			return out
		}
	}
}
