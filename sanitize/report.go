// Reports: what the sanitizer found, with the call stacks of both sides.
//
// Stacks are captured as program counters when an operation is observed
// (cheap: no symbolization) and turned into frames only when a report is
// made, which is the rare path.

package sanitize

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
)

// Kind is the class of a hazard. Each Kind is also an error, so a returned
// report can be matched with errors.Is(err, sanitize.UseAfterFree).
type Kind int

// The hazards the sanitizer reports.
const (
	// UseBeforeAlloc: a use on a stream not ordered after the allocation
	// (memory allocated on one stream, used on another without an event
	// wait or a synchronization between them).
	UseBeforeAlloc Kind = iota + 1
	// UseAfterFree: a use of memory whose free was already enqueued.
	UseAfterFree
	// FreeBeforeUse: a free not ordered after a use on another stream, so
	// the memory may be reused while that use runs.
	FreeBeforeUse
	// ReuseBeforeFree: memory handed to a new owner on a stream not
	// ordered after the previous owner's free (a resource's bug), or while
	// the previous owner still holds it.
	ReuseBeforeFree
	// Race: two uses on different streams, at least one a write, with no
	// order between them.
	Race
	// OutOfBounds: a declared use reaching past the end of its allocation.
	OutOfBounds
)

var kindNames = [...]string{
	UseBeforeAlloc:  "use not ordered after the allocation",
	UseAfterFree:    "use after free",
	FreeBeforeUse:   "free not ordered after a use",
	ReuseBeforeFree: "memory reused before its free is ordered",
	Race:            "unordered conflicting uses",
	OutOfBounds:     "use outside the allocation",
}

// Error is the kind's description; it makes Kind usable as an errors.Is
// target.
func (k Kind) Error() string {
	if k > 0 && int(k) < len(kindNames) {
		return "sanitize: " + kindNames[k]
	}
	return fmt.Sprintf("sanitize: Kind(%d)", int(k))
}

func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Side is one of the two operations of a report.
type Side struct {
	// Op is "allocation", "free", "read", "write" or "read-write".
	Op string
	// Stream is the ID of the stream it was enqueued on.
	Stream uint64
	// Ptr and Size are the range it touched.
	Ptr  gpu.DevicePtr
	Size int
	// Stack is where the host enqueued it, innermost call first (empty if
	// stacks are off).
	Stack []runtime.Frame
}

// Report is one hazard. It is an error; errors.Is matches its Kind.
type Report struct {
	Kind Kind
	// Alloc and AllocSize are the allocation concerned.
	Alloc     gpu.DevicePtr
	AllocSize int
	// This is the operation that revealed the hazard; Other the earlier
	// one it is not ordered with (or follows wrongly).
	This, Other Side
}

// Error is a one-line summary; Detail adds the stacks.
func (r *Report) Error() string {
	return fmt.Sprintf("sanitize: %s: %s on stream %d at %#x (%d bytes), %s on stream %d (allocation %#x, %d bytes)",
		r.Kind.String(), r.This.Op, r.This.Stream, uint64(r.This.Ptr), r.This.Size,
		r.Other.Op, r.Other.Stream, uint64(r.Alloc), r.AllocSize)
}

// Is reports whether target is r's Kind.
func (r *Report) Is(target error) bool {
	k, ok := target.(Kind)
	return ok && k == r.Kind
}

// Detail is the summary followed by both call stacks.
func (r *Report) Detail() string {
	var b strings.Builder
	b.WriteString(r.Error())
	b.WriteByte('\n')
	for _, s := range []Side{r.This, r.Other} {
		fmt.Fprintf(&b, "  %s on stream %d:\n", s.Op, s.Stream)
		if len(s.Stack) == 0 {
			b.WriteString("    (no stack)\n")
		}
		for _, f := range s.Stack {
			fmt.Fprintf(&b, "    %s\n        %s:%d\n", f.Function, f.File, f.Line)
		}
	}
	return b.String()
}

// maxStack bounds the frames kept per operation.
const maxStack = 16

// stack is a captured call stack, stored inline so that recording one
// allocates nothing.
type stack struct {
	n   int
	pcs [maxStack]uintptr
}

// capture records the caller's stack, skipping skip frames above capture's
// caller, keeping depth frames.
func capture(st *stack, skip, depth int) {
	if depth <= 0 {
		st.n = 0
		return
	}
	st.n = runtime.Callers(skip+2, st.pcs[:min(depth, maxStack)])
}

// frames symbolizes st, dropping the frames of this package and of buf,
// which only say how the operation reached the sanitizer.
func (st *stack) frames() []runtime.Frame {
	if st.n == 0 {
		return nil
	}
	var out []runtime.Frame
	it := runtime.CallersFrames(st.pcs[:st.n])
	for {
		f, more := it.Next()
		if !internalFrame(f.Function) || len(out) > 0 {
			out = append(out, f)
		}
		if !more {
			break
		}
	}
	return out
}

const (
	pkgSanitize = "github.com/streamalloc/streamalloc/sanitize."
	pkgBuf      = "github.com/streamalloc/streamalloc/buf."
)

func internalFrame(fn string) bool {
	return strings.HasPrefix(fn, pkgSanitize) || strings.HasPrefix(fn, pkgBuf)
}

func opName(a buf.Access) string { return a.String() }
