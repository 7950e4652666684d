package mr_test

// The hot paths allocate no Go memory: a pool's allocate/free pair served
// from its own lists, and each adaptor's pair, over a do-nothing upstream
// and over a pool. A test of counts, not of time, so that CI (which has
// neither a GPU nor a quiet machine) keeps the property that the
// benchmarks report as 0 allocs/op.

import (
	"bufio"
	"io"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/registry"
)

// pairAllocs is the Go allocations of one Allocate+Deallocate of size
// bytes through r on s, averaged over many pairs after a first one that
// lets caches grow.
func pairAllocs(t *testing.T, r mr.Resource, s gpu.Stream, size int) float64 {
	t.Helper()
	pair := func() {
		p, err := r.Allocate(size, s)
		if err != nil {
			t.Fatalf("allocate %d bytes: %v", size, err)
		}
		if err := r.Deallocate(p, size, s); err != nil {
			t.Fatalf("free %d bytes: %v", size, err)
		}
	}
	pair()
	return testing.AllocsPerRun(200, pair)
}

func TestHotPathsDoNotAllocate(t *testing.T) {
	dev := testdev.Device(t)
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	spec, ok := registry.Lookup("pool")
	if !ok {
		t.Fatal("no pool in the registry")
	}
	pool, closePool, err := spec.New(dev, registry.Options{Upstream: registry.UpstreamAsync, KeepReserved: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Synchronize(); err != nil {
			t.Error(err)
		}
		if err := closePool(); err != nil {
			t.Error(err)
		}
	}()
	for _, size := range []int{256, 4 << 10, 1 << 20, 4 << 20} {
		if n := pairAllocs(t, pool, s, size); n != 0 {
			t.Errorf("pool pair of %d bytes: %v allocations, want 0", size, n)
		}
	}

	null := newNull()
	ns := newFakeStream(null.dev.(*fakeDevice))
	logFile := bufio.NewWriterSize(io.Discard, 1<<16) // a buffered file, as a program logs
	for _, ac := range adaptorCases() {
		for _, up := range []struct {
			name string
			r    mr.Resource
			s    gpu.Stream
		}{{"null", null, ns}, {"pool", pool, s}} {
			r := ac.wrap(t, up.r)
			if ac.name == "logging" {
				r = mr.NewLogging(up.r, logFile, mr.LoggingOptions{})
			}
			if n := pairAllocs(t, r, up.s, 4<<10); n != 0 {
				t.Errorf("%s over %s: %v allocations per pair, want 0", ac.name, up.name, n)
			}
		}
	}
}
