package mr_test

import (
	"context"
	"fmt"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// A Pool over virtual memory: each stream's blocks live in one growable
// range, into which the pool maps physical memory granule by granule as
// its blocks need it, and from which it unmaps the granules of free
// blocks (once the work before their free is done) rather than set a new
// peak.
func ExampleNewVirtual() {
	dev, _ := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()

	vm, err := mr.NewVirtual(dev, mr.VirtualOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer vm.Close()
	pool, err := mr.NewPool(vm, mr.PoolOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	a, _ := pool.Allocate(3<<20, s) // a growable range, 4 MiB mapped
	b, _ := pool.Allocate(3<<20, s) // 1 MiB free after a, 2 MiB more mapped
	st := vm.Stats()
	fmt.Printf("granularity %d MiB, growable ranges %d, mapped %d MiB, live %d MiB\n",
		st.Granularity>>20, st.Growable, st.Mapped>>20, pool.Usage().Used>>20)

	pool.Deallocate(a, 3<<20, s)
	pool.Deallocate(b, 3<<20, s)
	pool.Release()                          // unmapped in stream order, the range given back
	vm.ReleaseContext(context.Background()) // wait for that work, then unmap
	st = vm.Stats()
	fmt.Printf("after release: mapped %d, peak mapped %d MiB, growable ranges %d\n", st.Mapped, st.PeakMapped>>20, st.Growable)
	// Output:
	// granularity 2 MiB, growable ranges 1, mapped 6 MiB, live 6 MiB
	// after release: mapped 0, peak mapped 6 MiB, growable ranges 0
}
