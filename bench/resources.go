// The resources the suite benchmarks, each built fresh for one case.
//
// Suballocators take their chunks from an Async resource on a pool of its
// own whose release threshold keeps everything: the benchmarks measure
// the suballocator, not the driver returning memory to the OS at every
// synchronization (which a Direct upstream, or a zero threshold, would
// add to every growth). Every resource is closed when its benchmark ends,
// the suballocator before its upstream, so a run of the whole suite on
// the GPU does not accumulate pools.

package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// A Resource is one kind of resource the suite benchmarks.
type Resource struct {
	// Name is the resource= part of benchmark names.
	Name string
	// New builds the resource on dev, for requests of at most maxBlock
	// bytes, and returns with it the function that closes it and what it
	// was built on. close may be called once, after every allocation was
	// freed.
	New func(dev gpu.Device, maxBlock int) (r mr.Resource, close func() error, err error)
}

// Resources lists the resources of the suite, in the order the suite
// runs them. Add variants here: both go test and the command pick them up.
var Resources = []Resource{
	{"direct", func(dev gpu.Device, _ int) (mr.Resource, func() error, error) {
		return mr.NewDirect(dev), noClose, nil
	}},
	{"managed", func(dev gpu.Device, _ int) (mr.Resource, func() error, error) {
		return mr.NewManaged(dev), noClose, nil
	}},
	{"async", func(dev gpu.Device, _ int) (mr.Resource, func() error, error) {
		up, err := newUpstream(dev)
		if err != nil {
			return nil, nil, err
		}
		return up, up.Close, nil
	}},
	{"pool", func(dev gpu.Device, _ int) (mr.Resource, func() error, error) {
		return over(dev, func(up mr.Resource) (closer, error) { return mr.NewPool(up, mr.PoolOptions{}) })
	}},
	{"fixedsize", func(dev gpu.Device, maxBlock int) (mr.Resource, func() error, error) {
		return over(dev, func(up mr.Resource) (closer, error) {
			return mr.NewFixedSize(up, mr.FixedSizeOptions{BlockSize: maxBlock, BlocksPerChunk: 16})
		})
	}},
	{"binning", func(dev gpu.Device, _ int) (mr.Resource, func() error, error) {
		return over(dev, func(up mr.Resource) (closer, error) { return mr.NewBinning(up, mr.BinningOptions{}) })
	}},
	{"arena", func(dev gpu.Device, _ int) (mr.Resource, func() error, error) {
		return over(dev, func(up mr.Resource) (closer, error) { return mr.NewArena(up, mr.ArenaOptions{}) })
	}},
}

// Variants are resources that only some workloads compare (they differ
// from one of Resources in a way the others do not exercise), listed by
// name in those workloads' resource lists (PipelineResources).
var Variants = []Resource{
	{"async_noreturnwait", func(dev gpu.Device, _ int) (mr.Resource, func() error, error) {
		r, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true, ReleaseThreshold: 1 << 62, NoReturnWait: true})
		if err != nil {
			return nil, nil, err
		}
		return r, r.Close, nil
	}},
}

// ResourceNames are the names of Resources, in order, then those of
// Variants.
func ResourceNames() []string {
	var names []string
	for _, r := range slices.Concat(Resources, Variants) {
		names = append(names, r.Name)
	}
	return names
}

// LookupResource returns the resource called name, among Resources and
// Variants.
func LookupResource(name string) (Resource, bool) {
	all := slices.Concat(Resources, Variants)
	i := slices.IndexFunc(all, func(r Resource) bool { return r.Name == name })
	if i < 0 {
		return Resource{}, false
	}
	return all[i], true
}

// NewResource builds the resource called name on dev for the benchmark
// b and closes it when b ends (b.Cleanup), failing b if it cannot be
// built or closed.
func NewResource(b *testing.B, name string, dev gpu.Device, maxBlock int) mr.Resource {
	b.Helper()
	spec, ok := LookupResource(name)
	if !ok {
		fatalf(b, "bench: unknown resource %q (want one of %s)", name, strings.Join(ResourceNames(), ", "))
	}
	r, closeFn, err := spec.New(dev, maxBlock)
	if err != nil {
		fatalf(b, "bench: new %s: %w", name, err)
	}
	b.Cleanup(func() {
		if err := closeFn(); err != nil {
			errorf(b, "bench: close %s: %w", name, err)
		}
	})
	return r
}

type closer interface {
	mr.Resource
	Close() error
}

func noClose() error { return nil }

// newUpstream is the Async resource suballocators draw from: a pool of
// its own that keeps every byte it reserved.
func newUpstream(dev gpu.Device) (*mr.Async, error) {
	return mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true, ReleaseThreshold: 1 << 62})
}

// over builds a suballocator over a fresh upstream; its close closes
// both, the suballocator first, and reports both errors.
func over(dev gpu.Device, build func(up mr.Resource) (closer, error)) (mr.Resource, func() error, error) {
	up, err := newUpstream(dev)
	if err != nil {
		return nil, nil, fmt.Errorf("upstream: %w", err)
	}
	r, err := build(up)
	if err != nil {
		return nil, nil, errors.Join(err, up.Close())
	}
	return r, func() error { return errors.Join(r.Close(), up.Close()) }, nil
}
