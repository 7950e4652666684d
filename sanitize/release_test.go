package sanitize_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/sanitize"
)

// The adaptor forwards Release and Reap, so a sanitized pool gives its
// cached chunks back like a bare one, and a replay that releases through
// the top of its stack leaves nothing behind.
func TestResourceForwardsReleaseAndReap(t *testing.T) {
	dev, err := sim.New(sim.Config{}).Device(0)
	must(t, err)
	s, err := dev.NewStream()
	must(t, err)
	defer s.Destroy()
	pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	must(t, err)
	z := sanitize.New(sanitize.Options{})
	r := z.Resource(pool)
	p, err := r.Allocate(1<<20, s)
	must(t, err)
	must(t, r.Deallocate(p, 1<<20, s))
	if pool.Usage().Reserved == 0 {
		t.Fatal("pool reserved nothing; the test would prove nothing")
	}
	must(t, r.Release())
	if u := pool.Usage(); u.Reserved != 0 || u.Used != 0 {
		t.Errorf("after Release through the sanitizer, pool usage = %+v, want nothing held", u)
	}
	if n, err := r.Reap(true); n != 0 || err != nil {
		t.Errorf("Reap over a pool (no pending-free accounting) = %d, %v; want 0, nil", n, err)
	}

	a, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	must(t, err)
	defer a.Close()
	ra := z.Resource(a)
	p, err = ra.Allocate(4096, s)
	must(t, err)
	must(t, ra.Deallocate(p, 4096, s))
	if n, err := ra.Reap(true); n != 4096 || err != nil {
		t.Errorf("Reap over async after one 4 KiB free = %d, %v; want 4096, nil", n, err)
	}
	if z.Count() != 0 {
		t.Errorf("sanitizer reported %d hazards on correct code", z.Count())
	}
}
