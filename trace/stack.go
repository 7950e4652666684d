// Call stacks of allocations, for readers whose format records them.
//
// A PyTorch snapshot records, with every trace entry, the Python and C++
// frames of the call that made it; a report shows them next to each block
// so that a person sees who allocated what. A Reader that knows stacks
// also implements StackReader, so that consumers that do not care (a
// replay that only measures) pay nothing for them.

package trace

import "strconv"

// Frame is one frame of a recorded call stack.
type Frame struct {
	// Function is the function's name as the trace spells it.
	Function string
	// File and Line locate the call; Line is 0 when the trace has none.
	File string
	Line int
}

// String returns "function (file:line)", leaving out what is unknown.
func (f Frame) String() string {
	loc := f.File
	if f.Line > 0 {
		loc += ":" + strconv.Itoa(f.Line)
	}
	switch {
	case f.Function == "":
		return loc
	case loc == "":
		return f.Function
	}
	return f.Function + " (" + loc + ")"
}

// StackReader is a Reader that knows where the recorded program made its
// allocations.
type StackReader interface {
	Reader
	// Stack returns the call stack of the allocation Next returned last,
	// in the order the trace lists its frames (innermost first in
	// PyTorch's snapshots), or nil if the trace recorded none for it (or
	// the event is not an Alloc). Events with the same stack share one
	// slice: the caller must not modify it. An error or io.EOF from Next
	// does not change what Stack returns.
	Stack() []Frame
}

// Stack returns the stack of the allocation Next returned last, if the
// file's format records stacks (a PyTorch snapshot), else nil.
func (f *File) Stack() []Frame {
	if sr, ok := f.Reader.(StackReader); ok {
		return sr.Stack()
	}
	return nil
}

var _ StackReader = (*File)(nil)
