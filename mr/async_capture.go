// Async in a capture (the rules are in capture.go): its calls pass through
// and become the graph's memory nodes.
//
// A graph allocation is remembered with the capture that made it
// (asyncLive.graph). Freed inside that capture, it is a free node: the
// bytes were graph memory, never the pool's, so they leave the accounting
// at once instead of becoming pending. Not freed there, every launch of
// the graph allocates it again at the same address, so a free outside the
// graph (after a launch) leaves it known, and Capture.Release forgets it.
// A pointer allocated outside the capture and freed inside it is kept for
// Release (the driver refuses that free with CUDA_ERROR_INVALID_VALUE).

package mr

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

// captured records graph allocation p of capture id.
func (r *Async) captured(id uint64, p gpu.DevicePtr, size int, s gpu.Stream) {
	r.live.insert(p, size, asyncLive{stream: s, graph: id}, nil)
	r.pending.AddLive(uint64(size))
	if c := lookupCapture(id); c != nil {
		c.onRelease(func() {
			if e, ok := r.live.lookup(p); ok && e.v.graph == id {
				if _, err := r.live.take(p, size, nil); err == nil {
					r.pending.RemoveLive(uint64(size))
				}
			}
		})
	}
}

// deallocateCaptured frees p (entry e, taken from the live table) when s
// captures (capture id) or p is a graph allocation.
func (r *Async) deallocateCaptured(id uint64, p gpu.DevicePtr, size int, s gpu.Stream, e asyncLive) error {
	switch {
	case id != 0 && e.graph == id:
		// A free node of the graph that allocated it.
		if err := r.events.order(s, e.stream); err != nil {
			r.live.restore(p, size, e)
			return fmt.Errorf("async: deallocate %#x: %w", uint64(p), err)
		}
		if err := r.dev.FreeAsync(p, s); err != nil {
			r.live.restore(p, size, e)
			return fmt.Errorf("async: deallocate %#x: %w", uint64(p), err)
		}
		r.pending.RemoveLive(uint64(size))
		return nil
	case id != 0:
		// Allocated outside this capture: the graph still uses it.
		r.live.restore(p, size, e)
		c, err := captureOf("async: deallocate", id, s)
		if err != nil {
			return err
		}
		return c.deferFree(r, p, size)
	default:
		// A graph's allocation freed by the program after a launch:
		// the next launch allocates it again.
		r.live.restore(p, size, e)
		if err := r.dev.FreeAsync(p, s); err != nil {
			return fmt.Errorf("async: deallocate graph allocation %#x: %w", uint64(p), err)
		}
		return nil
	}
}
