package mr_test

import (
	"context"
	"fmt"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// A Pool whose chunks are mapped into one reserved virtual range: the
// pool grows by mapping physical memory at the range's end, and the
// memory it releases is unmapped once the work before the free is done.
func ExampleNewVirtual() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()

	vm, err := mr.NewVirtual(dev, mr.VirtualOptions{ReserveSize: 1 << 30})
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
	p, _ := pool.Allocate(3<<20, s)
	st := vm.Stats()
	fmt.Printf("granularity %d MiB, reserved %d MiB, mapped %d MiB\n", st.Granularity>>20, st.Reserved>>20, st.Mapped>>20)

	pool.Deallocate(p, 3<<20, s)
	pool.Release()                          // the chunk goes back to vm, in stream order
	vm.ReleaseContext(context.Background()) // wait for that work, then unmap
	st = vm.Stats()
	fmt.Printf("after release: mapped %d, peak mapped %d MiB\n", st.Mapped, st.PeakMapped>>20)
	// Output:
	// granularity 2 MiB, reserved 1024 MiB, mapped 8 MiB
	// after release: mapped 0, peak mapped 8 MiB
}
