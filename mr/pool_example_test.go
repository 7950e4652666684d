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
