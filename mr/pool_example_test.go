package mr_test

import (
	"context"
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
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

// A pool with PackHoles over a Virtual that waits for decommits fills the
// free half granule beside a live block with a request that fits it
// exactly, where the default pool takes the block freed last, in the
// quick cache: the granule the live block keeps mapped holds the new
// block too. The rules cost a pair of blocks above 1 MiB served from the
// pool's lists about twice its time, hence an option.
func ExamplePoolOptions_packHoles() {
	dev, _ := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()

	const mib = 1 << 20
	for _, holes := range []bool{false, true} {
		vm, err := mr.NewVirtual(dev, mr.VirtualOptions{WaitForDecommits: true})
		if err != nil {
			fmt.Println(err)
			return
		}
		pool, err := mr.NewPool(vm, mr.PoolOptions{PackHoles: holes})
		if err != nil {
			fmt.Println(err)
			return
		}
		// From the range's start: a [0, 1.5) MiB, b [1.5, 6), c [6, 7),
		// d [7, 7.75), e [7.75, 9); then b and d are freed.
		sizes := []int{3 * mib / 2, 9 * mib / 2, mib, 3 * mib / 4, 5 * mib / 4}
		var ptrs [5]gpu.DevicePtr
		for i, n := range sizes {
			ptrs[i], _ = pool.Allocate(n, s)
		}
		pool.Deallocate(ptrs[1], sizes[1], s)
		pool.Deallocate(ptrs[3], sizes[3], s)
		x, _ := pool.Allocate(mib/2, s)
		fmt.Printf("PackHoles %v: half a MiB at %.2f MiB\n", holes, float64(x-ptrs[0])/mib)
		pool.Deallocate(x, mib/2, s)
		for _, i := range []int{0, 2, 4} {
			pool.Deallocate(ptrs[i], sizes[i], s)
		}
		pool.Close()
		vm.ReleaseContext(context.Background()) // wait for the unmaps
		vm.Close()
	}
	// Output:
	// PackHoles false: half a MiB at 7.00 MiB
	// PackHoles true: half a MiB at 1.50 MiB
}
