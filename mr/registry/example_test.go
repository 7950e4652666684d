package registry_test

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/registry"
)

// A --resource list is parsed against the names a command offers, then
// each resource is built fresh, used, and closed with what it was built
// on.
func Example() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()

	names, err := registry.Replay().Parse("pool, async,pool")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, name := range names {
		r, closeFn, err := registry.New(name, dev, registry.Options{})
		if err != nil {
			fmt.Println(err)
			return
		}
		p, _ := r.Allocate(1<<20, s)
		r.Deallocate(p, 1<<20, s)
		s.Synchronize()
		fmt.Printf("%s: %d MiB reserved at the peak\n", name, r.(mr.UsageReporter).Usage().PeakReserved>>20)
		if err := closeFn(); err != nil {
			fmt.Println(err)
		}
	}

	_, err = registry.Replay().Parse("pool,fixedsize")
	fmt.Println(err)
	// Output:
	// pool: 8 MiB reserved at the peak
	// async: 32 MiB reserved at the peak
	// unknown resource "fixedsize" (want one of direct, async, pool, arena, binning, vmm, pool_vmm, pool_vmm_holes, pool_vmm_holes_pair, hostpool, hostpool_driver, or all)
}
