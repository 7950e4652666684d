package mr_test

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// Managed memory prefetched to the device before a kernel touches it: the
// kernel finds every page there. The simulator counts the page faults a
// missing prefetch would have cost.
func ExampleManaged_Prefetch() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	k, _ := kernels.Load(dev)
	m := mr.NewManaged(dev)
	const size = 4 << 20

	cold, _ := m.Allocate(size, s)
	_ = k.Fill(s, cold, size/4, 1) // pages fault in one by one

	warm, _ := m.Allocate(size, s)
	_ = m.Advise(warm, size, gpu.AdviseSetPreferredLocation, gpu.DeviceLocation(0))
	_ = m.Prefetch(warm, size, gpu.DeviceLocation(0), s) // in stream order, before the kernel
	_ = k.Fill(s, warm, size/4, 1)
	_ = s.Synchronize()

	st := dev.(*sim.Device).ManagedStats()
	fmt.Println("faults:", st.DeviceFaults, "prefetched pages:", st.PrefetchedToDevice)
	_ = m.Deallocate(cold, size, s)
	_ = m.Deallocate(warm, size, s)
	// Output:
	// faults: 64 prefetched pages: 64
}

// The driver's own pool of pinned host memory: stream-ordered like device
// memory, so the host waits for the stream before it touches a buffer.
func ExampleDriverHostPool() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	pool, err := mr.NewDriverHostPool(dev, mr.DriverHostPoolOptions{ReleaseThreshold: 64 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	d, _ := dev.Malloc(1 << 20)
	for i := range 3 {
		b, _ := mr.AllocateHost[byte](pool, 1<<20, s)
		_ = s.Synchronize() // now the host may write it
		b[0] = byte(i)
		_ = dev.CopyHtoDAsync(d, b, s)
		_ = mr.FreeHost(pool, b, s) // in stream order: after the copy
	}
	_ = s.Synchronize()
	u := pool.Usage()
	fmt.Println("used:", mr.FormatBytes(u.Used), "reserved:", mr.FormatBytes(u.Reserved))
	_ = pool.Close()
	// Output:
	// used: 0 B reserved: 1.0 MiB
}
