// Leaks: buffers the garbage collector found open.
//
// A Buffer that becomes unreachable while open is closed by a cleanup (the
// safety net of buffer.go): its memory is freed on its stream after every
// recorded use, as Close would. That keeps the memory from being lost, but
// the program still has a leak: the memory was held until a collection
// happened to run, and the code that should have closed the buffer did
// not. So each such collection is reported, not silently healed:
//
//   - it is counted (Leaks);
//   - a Tracking adaptor in the buffer's resource chain records it, with
//     the stack that allocated it (mr.Tracking.MarkLeaked; its leak report
//     lists it);
//   - the leak handler is called with a Leak: the allocation, its stack
//     (from the Tracking adaptor, or recorded by New while a handler is
//     installed and the chain has no Tracking), and the error of the free
//     if it failed. The default handler writes one line and the stack to
//     the standard logger (package log); SetLeakHandler replaces it.
//
// Invariants: every collection of an open buffer is counted once and
// reported once; the handler runs on the cleanup goroutine after the
// free, never under a buffer's lock.

package buf

import (
	"fmt"
	"log"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// Leak is a buffer the garbage collector found open and closed.
type Leak struct {
	Ptr    gpu.DevicePtr
	Size   int
	Stream uint64 // the ID of the stream it was ordered on, where it was freed
	// Resource is the resource the buffer allocated from.
	Resource mr.Resource
	// Stack is the allocation's call stack (return addresses, innermost
	// first), or nil if neither a Tracking adaptor nor New recorded it.
	Stack []uintptr
	// Err is the error of the free, or nil: with an error the memory
	// stays allocated in the resource's accounting.
	Err error
}

// Frames resolves Stack into source locations, innermost first.
func (l Leak) Frames() []runtime.Frame {
	if len(l.Stack) == 0 {
		return nil
	}
	var out []runtime.Frame
	fr := runtime.CallersFrames(l.Stack)
	for {
		f, more := fr.Next()
		out = append(out, f)
		if !more {
			return out
		}
	}
}

// String is one line: "buf: leak: 4.0 MiB at 0x7f0000200000 (stream 3)
// collected without Close, allocated at main.load (main.go:42)".
func (l Leak) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "buf: leak: %s at %#x (stream %d) collected without Close", mr.FormatBytes(uint64(l.Size)),
		uint64(l.Ptr), l.Stream)
	if f, ok := l.caller(); ok {
		fmt.Fprintf(&b, ", allocated at %s (%s:%d)", f.Function, f.File, f.Line)
	}
	if l.Err != nil {
		fmt.Fprintf(&b, "; the free failed, the memory stays allocated: %v", l.Err)
	}
	return b.String()
}

// caller is the innermost frame outside packages buf and mr: the code that
// asked for the buffer.
func (l Leak) caller() (runtime.Frame, bool) {
	for _, f := range l.Frames() {
		if !strings.HasPrefix(f.Function, "github.com/streamalloc/streamalloc/buf.") &&
			!strings.HasPrefix(f.Function, "github.com/streamalloc/streamalloc/mr.") {
			return f, true
		}
	}
	return runtime.Frame{}, false
}

var (
	leaks       atomic.Uint64
	leakHandler atomic.Pointer[func(Leak)]
)

func init() {
	h := logLeak
	leakHandler.Store(&h)
}

// logLeak is the default handler: the line and the stack, to the
// standard logger.
func logLeak(l Leak) {
	var b strings.Builder
	b.WriteString(l.String())
	for _, f := range l.Frames() {
		fmt.Fprintf(&b, "\n\t%s\n\t\t%s:%d", f.Function, f.File, f.Line)
	}
	log.Print(b.String())
}

// Leaks returns how many buffers the garbage collector has found open
// since the program started.
func Leaks() uint64 { return leaks.Load() }

// SetLeakHandler makes h the function called for each buffer the garbage
// collector finds open (after its memory is freed), and returns the
// previous handler. A nil h reports nothing (leaks are still counted, and
// recorded by Tracking adaptors). While a handler is installed, New
// records the allocation's stack of buffers whose chain has no Tracking
// adaptor (runtime.Callers: about a microsecond).
func SetLeakHandler(h func(Leak)) (previous func(Leak)) {
	var p *func(Leak)
	if h != nil {
		p = &h
	}
	if old := leakHandler.Swap(p); old != nil {
		return *old
	}
	return nil
}

// findTracking walks res and its upstreams for a Tracking adaptor, as
// findObserver does for an Observer.
func findTracking(res mr.Resource) *mr.Tracking {
	for range 64 {
		if t, ok := res.(*mr.Tracking); ok {
			return t
		}
		u, ok := res.(mr.Wrapper)
		if !ok {
			return nil
		}
		res = u.Upstream()
		if res == nil {
			return nil
		}
	}
	return nil
}

// leakStack is what New records for a later leak report: nothing if no
// handler is installed or a Tracking adaptor will know the stack.
func leakStack(res mr.Resource, skip int) []uintptr {
	if leakHandler.Load() == nil || findTracking(res) != nil {
		return nil
	}
	var pcs [32]uintptr
	n := runtime.Callers(skip+1, pcs[:])
	return append([]uintptr(nil), pcs[:n]...)
}

// reportLeak counts and reports the collection of c, whose live
// allocation was sn: Tracking is told before the free (after it, the
// pointer is no longer live there), the handler after.
func (c *core) reportLeak(sn *snapshot, free func() error) {
	leaks.Add(1)
	l := Leak{Ptr: sn.ptr, Size: sn.size, Stream: sn.stream.ID(), Resource: c.res, Stack: c.stack}
	if t := findTracking(c.res); t != nil {
		if a, ok := t.MarkLeaked(sn.ptr); ok {
			l.Stack = a.Stack
		}
	}
	l.Err = free()
	if h := leakHandler.Load(); h != nil {
		(*h)(l)
	}
}
