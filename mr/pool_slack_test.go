package mr_test

import (
	"errors"
	"math"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// TestPoolReservedSlack: a growth at the high-water mark gives an idle
// chunk back first by default; with ReservedSlack the pool keeps it while
// what it reserves after the growth stays within (1+ReservedSlack) times
// its peak of used bytes, and gives idle chunks back, largest first, only
// as far as a growth beyond that needs.
//
// The program: 96 MiB and 24 MiB live (120 MiB, the peak), the 24 MiB
// freed, then 28 MiB (which the idle 24 MiB chunk cannot hold) allocated
// and freed, then 32 MiB. Without slack each growth gives back the idle
// chunk before it; with 0.25 the first growth keeps the 24 MiB chunk
// (120+28 = 148 MiB <= 1.25 x 120 MiB), and the second gives back only
// the 28 MiB chunk (148+32 = 180 MiB would pass 1.25 x 124 MiB = 155 MiB;
// 120+32 = 152 MiB does not).
func TestPoolReservedSlack(t *testing.T) {
	const mib = 1 << 20
	type state struct {
		reserved, peakReserved, peakUsed uint64
		growths, releases                uint64
	}
	cases := []struct {
		slack       float64
		afterFirst  state // after the 28 MiB growth
		afterSecond state // after the 32 MiB growth
	}{
		{0, state{124 * mib, 124 * mib, 124 * mib, 3, 1}, state{128 * mib, 128 * mib, 128 * mib, 4, 2}},
		{0.25, state{148 * mib, 148 * mib, 124 * mib, 3, 0}, state{152 * mib, 152 * mib, 128 * mib, 4, 1}},
		// Too little slack for the first growth to keep the idle chunk
		// (148 MiB > 1.2 x 120 = 144 MiB); for the second, 1.2 x 124 =
		// 148.8 MiB: 124+32 passes it, so the 28 MiB chunk goes too.
		{0.2, state{124 * mib, 124 * mib, 124 * mib, 3, 1}, state{128 * mib, 128 * mib, 128 * mib, 4, 2}},
	}
	for _, c := range cases {
		dev := poolSimDevice(t)
		s := poolStream(t, dev)
		p := newPool(t, mr.NewDirect(dev), mr.PoolOptions{SplitBig: true, ReservedSlack: c.slack})
		alloc := func(n int) gpu.DevicePtr {
			t.Helper()
			ptr, err := p.Allocate(n, s)
			if err != nil {
				t.Fatal(err)
			}
			return ptr
		}
		free := func(ptr gpu.DevicePtr, n int) {
			t.Helper()
			if err := p.Deallocate(ptr, n, s); err != nil {
				t.Fatal(err)
			}
		}
		now := func() state {
			u, st := p.Usage(), p.Stats()
			return state{u.Reserved, u.PeakReserved, u.PeakUsed, st.Growths, st.Releases}
		}
		x := alloc(96 * mib)
		free(alloc(24*mib), 24*mib)
		z := alloc(28 * mib)
		if got := now(); got != c.afterFirst {
			t.Errorf("slack %v, after the 28 MiB growth: %+v, want %+v", c.slack, got, c.afterFirst)
		}
		free(z, 28*mib)
		w := alloc(32 * mib)
		got := now()
		if got != c.afterSecond {
			t.Errorf("slack %v, after the 32 MiB growth: %+v, want %+v", c.slack, got, c.afterSecond)
		}
		if bound := math.Max(1+c.slack, 1) * float64(got.peakUsed); float64(got.peakReserved) > bound {
			t.Errorf("slack %v: peak reserved %d above %v", c.slack, got.peakReserved, bound)
		}
		free(w, 32*mib)
		free(x, 96*mib)
		if err := p.Release(); err != nil {
			t.Fatal(err)
		}
		if u := p.Usage(); u.Reserved != 0 {
			t.Errorf("slack %v: %d bytes reserved after freeing everything and Release", c.slack, u.Reserved)
		}
	}
}

// TestPoolReservedSlackInvalid: a slack outside [0, 1] (NaN included) is
// refused.
func TestPoolReservedSlackInvalid(t *testing.T) {
	dev := poolSimDevice(t)
	for _, s := range []float64{-0.01, 1.01, math.NaN(), math.Inf(1)} {
		if _, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{ReservedSlack: s}); !errors.Is(err, gpu.ErrInvalidValue) {
			t.Errorf("NewPool with ReservedSlack %v: %v, want ErrInvalidValue", s, err)
		}
	}
	for _, s := range []float64{0, 0.03, 1} {
		p, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{ReservedSlack: s})
		if err != nil {
			t.Errorf("NewPool with ReservedSlack %v: %v", s, err)
			continue
		}
		p.Close()
	}
}
