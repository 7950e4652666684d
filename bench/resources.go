// The resources the suite benchmarks, each built fresh for one case from
// the table of package registry.
//
// Suballocators take their chunks from an Async resource on a pool of its
// own whose release threshold keeps everything (registry.UpstreamAsync
// with KeepReserved), and async keeps everything too: the benchmarks
// measure the allocator, not the driver returning memory to the OS at
// every synchronization (which a Direct upstream, or a zero threshold,
// would add to every growth). Every resource is closed when its benchmark
// ends, the suballocator before its upstream, so a run of the whole suite
// on the GPU does not accumulate pools.

package bench

import (
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/registry"
)

// Resources are the names of the resources every workload runs on, in
// the order the suite runs them: the registry's table without its
// variants, which run only in the workloads that name them
// (PipelineResources). A resource added to the registry joins the suite,
// go test's benchmarks and the command at once.
var Resources = suiteResources()

func suiteResources() []string {
	var names []string
	for _, r := range registry.Resources() {
		if !r.Variant && !r.Host {
			names = append(names, r.Name)
		}
	}
	return names
}

// ResourceOptions are the registry options the suite builds its
// resources with, for requests of at most maxBlock bytes.
func ResourceOptions(maxBlock int) registry.Options {
	return registry.Options{Upstream: registry.UpstreamAsync, KeepReserved: true, MaxBlock: maxBlock}
}

// NewResource builds the resource called name (any of the registry's) on
// dev for the benchmark b, with ResourceOptions(maxBlock), and closes it
// when b ends (b.Cleanup), failing b if it cannot be built or closed.
func NewResource(b *testing.B, name string, dev gpu.Device, maxBlock int) mr.Resource {
	b.Helper()
	spec, ok := registry.Lookup(name)
	if !ok {
		fatalf(b, "bench: unknown resource %q (want one of %s)", name, strings.Join(registry.All(), ", "))
	}
	r, closeFn, err := spec.New(dev, ResourceOptions(maxBlock))
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
