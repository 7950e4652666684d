// Chains of resources: an adaptor (or a suballocator) wraps an upstream,
// which may wrap another. Walking the chain lets an adaptor reach every
// resource below it, so that Retry can reap the pending frees and release
// the cached memory of all of them, and reports can find the resource that
// knows a statistic.
//
// The adaptors of this package are transparent to Release and Reap: they
// forward both to their upstream, so an adaptor stacked over a pool is
// released and reaped like the pool. Reclaim, which walks the chain itself,
// skips them so that nothing below is released twice for one call.
//
// Invariant: Chain stops at the first resource that does not wrap another,
// and after maxChain steps, so a chain that loops (a programming error)
// cannot hang it.

package mr

import (
	"errors"
	"fmt"
)

// Wrapper is implemented by resources that allocate from another
// resource: Upstream returns it.
type Wrapper interface {
	Upstream() Resource
}

// maxChain bounds the walk in Chain.
const maxChain = 64

// Chain returns r and every resource below it, nearest first: r, its
// upstream, the upstream's upstream, and so on.
func Chain(r Resource) []Resource {
	var out []Resource
	for r != nil && len(out) < maxChain {
		out = append(out, r)
		w, ok := r.(Wrapper)
		if !ok {
			break
		}
		r = w.Upstream()
	}
	return out
}

// passThrough is embedded by the adaptors of this package: it holds the
// upstream and forwards Release and Reap to it.
type passThrough struct{ up Resource }

// Upstream is the wrapped resource.
func (w passThrough) Upstream() Resource { return w.up }

// Release releases the upstream's cached memory, if it caches any.
func (w passThrough) Release() error {
	if r, ok := w.up.(Releaser); ok {
		return r.Release()
	}
	return nil
}

// Reap reaps the upstream's pending frees, if it keeps any.
func (w passThrough) Reap(wait bool) (uint64, error) {
	if r, ok := w.up.(Reaper); ok {
		return r.Reap(wait)
	}
	return 0, nil
}

func (passThrough) forwards() {}

// forwarder is implemented by the adaptors that forward Release and Reap.
type forwarder interface{ forwards() }

// Reclaim frees what the resources of r's chain hold without anyone
// using it: it reaps the pending frees of every Reaper (querying the
// streams, or synchronizing them if wait), then releases the cached memory
// of every Releaser, so memory whose free was just seen complete is
// released too. It goes on past errors (each step may free memory that the
// next needs) and returns them joined, with the bytes reaped.
func Reclaim(r Resource, wait bool) (reaped uint64, err error) {
	var errs []error
	chain := Chain(r)
	for _, res := range chain {
		if _, ok := res.(forwarder); ok {
			continue
		}
		if rp, ok := res.(Reaper); ok {
			n, err := rp.Reap(wait)
			reaped += n
			if err != nil {
				errs = append(errs, fmt.Errorf("reap: %w", err))
			}
		}
	}
	for _, res := range chain {
		if _, ok := res.(forwarder); ok {
			continue
		}
		if rl, ok := res.(Releaser); ok {
			if err := rl.Release(); err != nil {
				errs = append(errs, fmt.Errorf("release: %w", err))
			}
		}
	}
	return reaped, errors.Join(errs...)
}
