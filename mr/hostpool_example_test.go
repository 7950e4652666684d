package mr_test

import (
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
