package mr_test

import (
	"errors"
	"fmt"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// A staging buffer per copy from a HostPool: filled by the host, copied to
// the device, freed in the stream's order; the next request gets the same
// page-locked block back once the copy is done, without a new
// cuMemAllocHost.
func ExampleHostPool() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	pool := mr.NewHostPool(dev)
	d, _ := dev.Malloc(1 << 20)

	for range 3 {
		v, _ := mr.AllocateHost[float32](pool, 1024, s)
		for i := range v {
			v[i] = float32(i)
		}
		_ = dev.CopyHtoDAsync(d, mr.HostBytes(v), s)
		_ = mr.FreeHost(pool, v, s)
		_ = s.Synchronize() // the copy is done: the block is free for the host again
	}
	st := pool.Stats()
	fmt.Println("cuMemAllocHost calls:", st.Misses, "reused:", st.Hits)
	fmt.Println("reserved:", mr.FormatBytes(pool.Usage().Reserved))
	// Output:
	// cuMemAllocHost calls: 1 reused: 2
	// reserved: 4.0 KiB
}

// A HostPool under adaptors: a budget for page-locked memory, counters,
// and the summary of the whole stack, as for device memory. AllocateHost
// and FreeHost go through the stack, so the adaptors see every slice.
func ExampleHostPool_adaptors() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	pool := mr.NewHostPool(dev)
	staging := mr.NewStats(mr.NewLimit(pool, mr.NewBudget(64<<20)), mr.StatsOptions{})

	v, _ := mr.AllocateHost[float32](staging, 1<<20, s) // 4 MiB
	_, err := mr.AllocateHost[float32](staging, 16<<20, s)
	fmt.Println("over the budget:", errors.Is(err, mr.ErrOutOfMemory))
	fmt.Println(mr.StatsOf(staging))
	_ = mr.FreeHost(staging, v, s)

	// The pointer form, for code written against mr.Resource.
	p, _ := staging.Allocate(4096, s)
	b, _ := mr.HostBytesOf(staging, p, 4096)
	copy(b, "staged")
	_ = staging.Deallocate(p, 4096, s)
	fmt.Println("allocations:", staging.Snapshot().Allocations.Total)
	// Output:
	// over the budget: true
	// stats > limit > host pool: reserved 4.0 MiB (peak 4.0 MiB), used 4.0 MiB (peak 4.0 MiB)
	// allocations: 2
}
