package mr_test

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// A pool over the direct resource: the first request grows the pool by a
// chunk, the next ones on the same stream reuse its free blocks (here the
// block just freed, from the quick cache), and Release gives the idle
// chunk back.
func ExampleNewPool() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()

	pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	a, _ := pool.Allocate(1000, s)
	pool.Deallocate(a, 1000, s)
	b, _ := pool.Allocate(1000, s) // served from the pool's own lists
	fmt.Println("reused:", a == b, "aligned:", b%mr.Alignment == 0)

	u := pool.Usage()
	fmt.Printf("used %d, reserved %d MiB\n", u.Used, u.Reserved>>20)
	st := pool.Stats()
	fmt.Printf("allocations %d, from the quick cache %d, growths %d\n", st.Allocations, st.QuickHits, st.Growths)
	pool.Deallocate(b, 1000, s)
	pool.Release()
	fmt.Println("reserved after Release:", pool.Usage().Reserved)
	// Output:
	// reused: true aligned: true
	// used 1000, reserved 2 MiB
	// allocations 2, from the quick cache 1, growths 1
	// reserved after Release: 0
}

// A pool with ReservedSlack keeps an idle chunk through a growth at its
// high-water mark, where the default pool gives it back first, as long as
// it reserves at most 1.25 times its peak of used bytes after the growth.
func ExamplePoolOptions_reservedSlack() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()

	for _, slack := range []float64{0, 0.25} {
		pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{ReservedSlack: slack})
		if err != nil {
			fmt.Println(err)
			return
		}
		const mib = 1 << 20
		x, _ := pool.Allocate(96*mib, s)
		y, _ := pool.Allocate(24*mib, s) // 120 MiB used: the peak
		pool.Deallocate(y, 24*mib, s)    // its chunk is idle
		z, _ := pool.Allocate(28*mib, s) // does not fit the idle chunk: a growth
		u, st := pool.Usage(), pool.Stats()
		fmt.Printf("slack %v: reserved %d MiB, peak used %d MiB, chunks given back %d\n",
			slack, u.Reserved>>20, u.PeakUsed>>20, st.Releases)
		pool.Deallocate(z, 28*mib, s)
		pool.Deallocate(x, 96*mib, s)
		pool.Close()
	}
	// Output:
	// slack 0: reserved 124 MiB, peak used 124 MiB, chunks given back 1
	// slack 0.25: reserved 148 MiB, peak used 124 MiB, chunks given back 0
}
