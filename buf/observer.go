// Observer: the hook through which buffers report what they do to a
// checker such as the stream-order sanitizer (package sanitize).
//
// A buffer finds its observer once, at New: the resource itself if it
// implements Observer, else the first resource down a chain of adaptors
// (each an mr.Wrapper) that does, else the one given with
// WithObserver. Calls to the observer are made with the buffer's lock held
// and in stream order: waits first, then the use, then the record.

package buf

import (
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// Observer is told of every stream operation a buffer issues besides
// allocation and free (which the resource itself sees). Its methods must be
// safe for concurrent use.
type Observer interface {
	// ObserveUse is called when a use of size bytes at p with access a is
	// about to be enqueued on s, after the waits that order it. A non-nil
	// error refuses the use: the buffer enqueues nothing for it and returns
	// the error.
	ObserveUse(p gpu.DevicePtr, size int, s gpu.Stream, a Access) error
	// ObserveRecord is called after e was recorded on s.
	ObserveRecord(e gpu.Event, s gpu.Stream)
	// ObserveWait is called after s was made to wait on e.
	ObserveWait(s gpu.Stream, e gpu.Event)
}

// findObserver walks res and its upstreams for an Observer. The walk is
// bounded so that a cycle of adaptors cannot hang it.
func findObserver(res mr.Resource) Observer {
	for range 64 {
		if o, ok := res.(Observer); ok {
			return o
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
