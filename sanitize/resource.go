// Resource: the sanitizer as an mr adaptor.
//
// Allocate and Deallocate pass through to the upstream and are checked
// around it: a free is checked and marked before the upstream sees it (so
// that a refused free is not made, and a concurrent allocation of the same
// memory sees it freed) and unmarked if the upstream fails; an allocation
// is checked after the upstream returns the memory (the only time the
// address is known) and given back if refused. Failed upstream calls are
// not recorded, so the sanitizer's view never runs ahead of the resource's.

package sanitize

import (
	"fmt"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// Resource wraps an upstream resource and checks every allocation, free
// and declared use made through it. It implements mr.Resource and
// buf.Observer and is safe for concurrent use.
type Resource struct {
	z  *Sanitizer
	up mr.Resource
	// ordersReuse: the upstream orders cross-stream reuse itself (see
	// Options.UpstreamOrdersReuse), set or detected.
	ordersReuse bool
}

// poolAttributes is implemented by resources over a driver pool
// (mr.Async): their reuse policies say whether the driver may reuse memory
// across streams on its own.
type poolAttributes interface {
	Attribute(a gpu.PoolAttr) (uint64, error)
}

// Resource returns an adaptor over upstream that reports to z. If
// upstream is a driver pool (it reports pool attributes) whose policies
// let the driver reuse memory across streams by itself (internal
// dependencies, or opportunistic reuse of completed frees), the adaptor
// trusts its reuse as if Options.UpstreamOrdersReuse were set: the driver
// never hands out memory unordered, and what it does to order it is
// invisible.
func (z *Sanitizer) Resource(upstream mr.Resource) *Resource {
	r := &Resource{z: z, up: upstream, ordersReuse: z.opts.UpstreamOrdersReuse}
	if pa, ok := upstream.(poolAttributes); ok && !r.ordersReuse {
		for _, a := range []gpu.PoolAttr{gpu.PoolReuseAllowInternalDependencies, gpu.PoolReuseAllowOpportunistic} {
			if v, err := pa.Attribute(a); err == nil && v != 0 {
				r.ordersReuse = true
			}
		}
	}
	return r
}

// Wrap returns an adaptor over upstream with a Sanitizer of its own.
func Wrap(upstream mr.Resource, opts Options) *Resource {
	return New(opts).Resource(upstream)
}

// Sanitizer is the state the adaptor reports to.
func (r *Resource) Sanitizer() *Sanitizer { return r.z }

// Upstream is the wrapped resource.
func (r *Resource) Upstream() mr.Resource { return r.up }

// Device is the upstream's device.
func (r *Resource) Device() gpu.Device {
	if r.up == nil {
		return nil
	}
	return r.up.Device()
}

// Allocate allocates from the upstream and checks that the memory is not
// still owned and that its previous free is ordered before s.
func (r *Resource) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	if r.up == nil {
		return 0, fmt.Errorf("sanitize: allocate: nil upstream: %w", gpu.ErrInvalidHandle)
	}
	p, err := r.up.Allocate(size, s)
	if err != nil || s == nil {
		return p, err
	}
	var st stack
	capture(&st, 1, r.z.depth)
	if r.z.captureAlloc(p, size, s, &st) {
		// Graph memory: allocated at each launch (graph.go).
		r.z.hookCapture(s)
		return p, nil
	}
	if err := r.z.allocated(p, size, s, &st, r.ordersReuse); err != nil {
		if ferr := r.up.Deallocate(p, size, s); ferr != nil {
			return 0, fmt.Errorf("%w (and giving the memory back: %v)", err, ferr)
		}
		return 0, err
	}
	return p, nil
}

// Deallocate checks that the free is ordered after every use of the
// memory, then frees it upstream.
func (r *Resource) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	if r.up == nil {
		return fmt.Errorf("sanitize: deallocate: nil upstream: %w", gpu.ErrInvalidHandle)
	}
	if s == nil {
		return r.up.Deallocate(p, size, s)
	}
	this := site{sid: s.ID(), op: "free", ptr: p, size: size}
	capture(&this.st, 1, r.z.depth)
	if gpu.CaptureID(s) != 0 {
		// A free in a capture is made at each launch, or at the
		// capture's Release (graph.go).
		if err := r.up.Deallocate(p, size, s); err != nil {
			return err
		}
		if _, hook := r.z.captureFree(p, size, s, &this.st); hook {
			r.z.hookCapture(s)
		}
		return nil
	}
	reg, ps := r.z.checkFree(p, size, s, &this)
	if len(ps) > 0 && r.z.refuse() {
		return r.z.deliver(ps)
	}
	if err := r.up.Deallocate(p, size, s); err != nil {
		if reg != nil {
			r.z.revertFree(reg)
		}
		return err
	}
	if reg != nil {
		r.z.commitFree(reg)
	}
	return r.z.deliver(ps)
}

// ObserveUse checks a use a buffer is about to enqueue. A Resource not
// made by Sanitizer.Resource or Wrap refuses every use.
func (r *Resource) ObserveUse(p gpu.DevicePtr, size int, s gpu.Stream, a buf.Access) error {
	if r == nil || r.z == nil {
		return fmt.Errorf("sanitize: use: resource without a sanitizer: %w", gpu.ErrInvalidHandle)
	}
	return r.z.observeUse(p, size, s, a, 1)
}

// ObserveRecord notes an event a buffer recorded (unless the device is
// instrumented, which saw it already).
func (r *Resource) ObserveRecord(e gpu.Event, s gpu.Stream) {
	if r == nil || r.z == nil {
		return
	}
	if _, ok := e.(*event); ok {
		return
	}
	r.z.record(e, s)
}

// ObserveWait notes a wait a buffer enqueued (unless the device is
// instrumented).
func (r *Resource) ObserveWait(s gpu.Stream, e gpu.Event) {
	if r == nil || r.z == nil {
		return
	}
	if _, ok := e.(*event); ok {
		return
	}
	r.z.wait(s, e)
}

// Release forwards to the upstream if it caches memory (mr.Releaser), so
// that a sanitized stack is released like the bare one. The memory it
// returns was freed through the adaptor already.
func (r *Resource) Release() error {
	if rl, ok := r.up.(mr.Releaser); ok {
		return rl.Release()
	}
	return nil
}

// Reap forwards to the upstream if it keeps pending-free accounting
// (mr.Reaper).
func (r *Resource) Reap(wait bool) (uint64, error) {
	if rp, ok := r.up.(mr.Reaper); ok {
		return rp.Reap(wait)
	}
	return 0, nil
}
