package mr_test

import (
	"errors"
	"math"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
)

func TestPoolMappedSlackInvalid(t *testing.T) {
	dev := testdev.Device(t)
	for _, s := range []float64{-0.01, 1.5, math.NaN(), math.Inf(1)} {
		if _, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{MappedSlack: s}); !errors.Is(err, gpu.ErrInvalidValue) {
			t.Errorf("MappedSlack %v: %v, want ErrInvalidValue", s, err)
		}
	}
	for _, s := range []float64{0, 0.01, 1} {
		if _, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{MappedSlack: s}); err != nil {
			t.Errorf("MappedSlack %v: %v", s, err)
		}
	}
}

// churnSteps runs steps of a loop whose tensors do not lie where the last
// step's did, on a Pool over Virtual with the given MappedSlack, and
// returns the pool's commits and decommits after the first step, and its
// peaks.
func churnSteps(t *testing.T, slack float64, steps int) (moves uint64, u mr.Usage) {
	t.Helper()
	dev := testdev.Device(t)
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() }) // after the pool's and Virtual's
	v := newVirtual(t, dev, mr.VirtualOptions{})
	p := newPool(t, v, mr.PoolOptions{MappedSlack: slack})
	g := v.GrowGranularity()
	alloc := func(n int) gpu.DevicePtr {
		ptr, err := p.Allocate(n*g, s)
		if err != nil {
			t.Fatal(err)
		}
		return ptr
	}
	free := func(ptr gpu.DevicePtr, n int) {
		if err := p.Deallocate(ptr, n*g, s); err != nil {
			t.Fatal(err)
		}
	}
	var first mr.PoolStats
	for i := range steps {
		if i == 1 {
			first = p.Stats()
		}
		// Three activations, then the first and last die and a larger
		// one takes their place: it fits in neither hole.
		a, b, c := alloc(10), alloc(10), alloc(10)
		free(a, 10)
		free(c, 10)
		d := alloc(12)
		free(b, 10)
		free(d, 12)
	}
	st, u := p.Stats(), p.Usage()
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	if r := p.Usage().Reserved; r != 0 {
		t.Errorf("%d bytes reserved after freeing everything and Release", r)
	}
	return st.InPlaceGrowths + st.Decommits - first.InPlaceGrowths - first.Decommits, u
}

// TestPoolMappedSlack: a loop that moves its memory within its peak
// commits and decommits in every step under the high-water rule alone,
// and in none once the margin has grown; the pool then maps at most
// MappedSlack above its peak of used bytes.
func TestPoolMappedSlack(t *testing.T) {
	const steps = 6
	moves, u := churnSteps(t, 0, steps)
	t.Logf("without a margin: %d commits and decommits in %d steps, peak reserved %d, peak used %d", moves, steps-1, u.PeakReserved, u.PeakUsed)
	if moves < steps-1 {
		t.Errorf("%d commits and decommits in %d steps without a margin: the loop does not move memory", moves, steps-1)
	}
	moves, u = churnSteps(t, 0.1, steps)
	t.Logf("MappedSlack 0.1: %d commits and decommits in %d steps, peak reserved %d, peak used %d", moves, steps-1, u.PeakReserved, u.PeakUsed)
	if moves != 0 {
		t.Errorf("%d commits and decommits after the first step with MappedSlack 0.1, want 0", moves)
	}
	if limit := u.PeakUsed + u.PeakUsed/10; u.PeakReserved > limit {
		t.Errorf("peak reserved %d, above peak used %d and 10%%", u.PeakReserved, u.PeakUsed)
	}
}
