package devarena_test

import (
	"fmt"
	"log"

	"github.com/streamalloc/streamalloc/devarena"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// driverPool is the smallest mr.Resource: the driver's stream-ordered
// allocator, as the examples' upstream.
type driverPool struct{ dev gpu.Device }

func (r driverPool) Allocate(n int, s gpu.Stream) (gpu.DevicePtr, error) {
	return r.dev.MallocAsync(n, s)
}
func (r driverPool) Deallocate(p gpu.DevicePtr, _ int, s gpu.Stream) error {
	return r.dev.FreeAsync(p, s)
}
func (r driverPool) Device() gpu.Device { return r.dev }

var _ mr.Resource = driverPool{}

// An arena for one stream: kernels allocate from it, the host reads what
// they used and resets it for the next epoch.
func ExampleNew() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()

	// 64 KiB that kernels allocate from in 16-byte steps.
	a, err := devarena.New(driverPool{dev}, s, devarena.Config{Size: 64 << 10, Align: 16})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()

	// A kernel of 1000 threads, each calling sa_arena_alloc(arena, 24)
	// (pass a.Header() as its struct sa_arena* argument).
	k, err := devarena.LoadKernels(dev)
	if err != nil {
		log.Fatal(err)
	}
	if err := k.Bump(s, a, 1000, 24); err != nil {
		log.Fatal(err)
	}
	st, err := a.Stats()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("used:", st.HighWater, "overflow:", st.Overflow)

	// The next epoch asks for more than the region holds.
	a.Reset()
	k.Bump(s, a, 5000, 24)
	st, _ = a.Stats()
	fmt.Println("used:", st.HighWater, "overflow:", st.Overflow)
	// Output:
	// used: 32000 overflow: false
	// used: 65536 overflow: true
}

// One arena per stream, so that kernels of different streams never share
// (or reset) one counter.
func ExampleSet() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	set, err := devarena.NewSet(driverPool{dev}, devarena.Config{Size: 1 << 20})
	if err != nil {
		log.Fatal(err)
	}
	k, _ := devarena.LoadKernels(dev)
	var streams []gpu.Stream
	for range 3 {
		s, _ := dev.NewStream()
		streams = append(streams, s)
		a, err := set.For(s) // created on first use, in order on s
		if err != nil {
			log.Fatal(err)
		}
		k.Bump(s, a, 100, 256)
	}
	for i, s := range streams {
		a, _ := set.For(s) // the same arena again
		st, _ := a.Stats()
		fmt.Printf("stream %d: %d bytes\n", i, st.HighWater)
	}
	fmt.Println("arenas:", set.Len())
	if err := set.Close(); err != nil { // before the streams go
		log.Fatal(err)
	}
	for _, s := range streams {
		s.Destroy()
	}
	// Output:
	// stream 0: 25600 bytes
	// stream 1: 25600 bytes
	// stream 2: 25600 bytes
	// arenas: 3
}
