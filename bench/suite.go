// The suite: every workload on every resource it applies to, as a flat
// list of cases that go test and the command both iterate.
//
// A case's full name is the go test benchmark name without "Benchmark":
// Pair/resource=pool/size=4KiB runs as BenchmarkPair/resource=pool/size=4KiB
// in mr's benchmarks, so numbers from either harness line up. The list is
// ordered workload, then parameter, then resource, so the resources of
// one comparison are adjacent.

package bench

import (
	"fmt"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
)

// Workload names a benchmark workload; it is also the first element of
// its cases' names.
type Workload string

// The workloads.
const (
	WorkloadPair     Workload = "Pair"
	WorkloadStreams  Workload = "Streams"
	WorkloadRandom   Workload = "Random"
	WorkloadNotebook Workload = "Notebook"
	WorkloadPipeline Workload = "Pipeline"
)

// Parameters of the suite.
var (
	// PairSizes are the request sizes of the Pair cases.
	PairSizes = []int{256, 4 << 10, 64 << 10, 1 << 20}
	// StreamGoroutines are the goroutine (and stream) counts of the
	// Streams cases.
	StreamGoroutines = []int{1, 2, 4, 8, 16}
	// NotebookResources are the resources the notebook compares:
	// cuMemAlloc against the driver's stream-ordered pool and ours.
	NotebookResources = []string{"direct", "async", "pool"}
	// PipelineResources are the resources the pipeline compares: the
	// driver's pool with and without Async's return wait, and ours.
	PipelineResources = []string{"async", "async_noreturnwait", "pool"}
)

// StreamsSize is the request size of the Streams cases.
const StreamsSize = 4 << 10

// A Case is one benchmark: a workload, the resource it runs on, and its
// parameters.
type Case struct {
	Workload Workload
	Resource string        // a name in the registry (mr/registry)
	Size     int           // Pair and Streams: bytes per request
	Streams  int           // Streams: goroutines, each on its own stream
	Random   RandomOptions // Random
}

// Suite returns every case of the suite: Pair by size, Streams by
// goroutines, Random on every resource, Notebook on NotebookResources and
// Pipeline on PipelineResources.
func Suite() []Case {
	var cs []Case
	for _, size := range PairSizes {
		for _, r := range Resources {
			cs = append(cs, Case{Workload: WorkloadPair, Resource: r, Size: size})
		}
	}
	for _, g := range StreamGoroutines {
		for _, r := range Resources {
			cs = append(cs, Case{Workload: WorkloadStreams, Resource: r, Size: StreamsSize, Streams: g})
		}
	}
	for _, r := range Resources {
		cs = append(cs, Case{Workload: WorkloadRandom, Resource: r})
	}
	for _, name := range NotebookResources {
		cs = append(cs, Case{Workload: WorkloadNotebook, Resource: name})
	}
	for _, name := range PipelineResources {
		cs = append(cs, Case{Workload: WorkloadPipeline, Resource: name})
	}
	return cs
}

// param is the parameter part of the case's names ("size=4KiB"), empty
// for workloads without one.
func (c Case) param() string {
	switch c.Workload {
	case WorkloadPair:
		return "size=" + SizeName(c.Size)
	case WorkloadStreams:
		return fmt.Sprintf("goroutines=%d", c.Streams)
	}
	return ""
}

// Name is the case without its resource ("Pair/size=4KiB", "Random"): the
// cases that share it compare resources.
func (c Case) Name() string {
	if p := c.param(); p != "" {
		return string(c.Workload) + "/" + p
	}
	return string(c.Workload)
}

// Sub is the sub-benchmark name under Benchmark<Workload>
// ("resource=pool/size=4KiB").
func (c Case) Sub() string {
	if p := c.param(); p != "" {
		return "resource=" + c.Resource + "/" + p
	}
	return "resource=" + c.Resource
}

// FullName is the go test benchmark name without "Benchmark"
// ("Pair/resource=pool/size=4KiB").
func (c Case) FullName() string { return string(c.Workload) + "/" + c.Sub() }

// MaxBlock is the largest request the case makes: the block size a
// fixed-size resource needs to serve it.
func (c Case) MaxBlock() int {
	switch c.Workload {
	case WorkloadRandom:
		return c.Random.withDefaults().MaxSize
	case WorkloadNotebook:
		return NotebookBytes
	case WorkloadPipeline:
		return PipelineBytes
	}
	return c.Size
}

// Run runs the case as benchmark b on dev: it makes the streams, loads
// the kernels the workload needs and builds a fresh resource, all closed
// when b ends, then runs the workload.
func (c Case) Run(b *testing.B, dev gpu.Device) {
	b.Helper()
	// Streams first: cleanups run last-in first-out, and closing the
	// resource may enqueue its releases on them.
	var streams []gpu.Stream
	n := 1
	switch c.Workload {
	case WorkloadStreams:
		n = c.Streams
	case WorkloadPipeline:
		n = 2 // producer, consumer
	}
	for range n {
		streams = append(streams, newStream(b, dev))
	}
	var k *kernels.Kernels
	if c.Workload == WorkloadNotebook || c.Workload == WorkloadPipeline {
		var err error
		if k, err = kernels.Load(dev); err != nil {
			fatalf(b, "bench: load kernels: %w", err)
		}
	}
	r := NewResource(b, c.Resource, dev, c.MaxBlock())
	switch c.Workload {
	case WorkloadPair:
		Pair(b, r, streams[0], c.Size)
	case WorkloadStreams:
		Streams(b, r, streams, c.Size)
	case WorkloadRandom:
		Random(b, r, streams[0], c.Random)
	case WorkloadNotebook:
		Notebook(b, r, streams[0], k)
	case WorkloadPipeline:
		Pipeline(b, r, streams[0], streams[1], k)
	default:
		fatalf(b, "bench: unknown workload %q", c.Workload)
	}
}

// newStream makes a stream for b, synchronized and destroyed when b
// ends.
func newStream(b *testing.B, dev gpu.Device) gpu.Stream {
	b.Helper()
	s, err := dev.NewStream()
	if err != nil {
		fatalf(b, "bench: new stream: %w", err)
	}
	b.Cleanup(func() {
		if err := s.Synchronize(); err != nil {
			errorf(b, "bench: synchronize stream: %w", err)
		}
		if err := s.Destroy(); err != nil {
			errorf(b, "bench: destroy stream: %w", err)
		}
	})
	return s
}

// SizeName writes n bytes the way case names do: 256B, 4KiB, 1MiB.
func SizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
