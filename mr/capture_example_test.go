package mr_test

import (
	"encoding/binary"
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// A step that allocates a scratch buffer from a pool, fills it with a
// kernel, copies a word of it out and frees it, captured into a CUDA graph
// and replayed. During the capture the pool serves the stream from the
// capture's private memory, so the graph's scratch buffer is never handed
// to anyone else; Release gives that memory back once the graph is gone.
// (On a GPU, open the device with gpu/backend instead of the simulator.)
func ExampleBeginCapture() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()
	k, _ := kernels.Load(dev)
	pool, _ := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	out, _ := dev.MallocHost(4) // a captured copy needs pinned host memory
	defer dev.FreeHost(out)

	c, err := mr.BeginCapture(s, gpu.CaptureGlobal, mr.CaptureOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	scratch, _ := pool.Allocate(1<<20, s)
	k.Fill(s, scratch, 1<<18, 42)             // word i = 42 + i
	dev.CopyDtoHAsync(out, scratch+4*1000, s) // word 1000
	pool.Deallocate(scratch, 1<<20, s)        // recorded, not run
	g, err := c.End()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("before any launch:", binary.LittleEndian.Uint32(out))

	x, _ := g.Instantiate(0)
	for range 3 {
		x.Launch(s)
	}
	s.Synchronize()
	fmt.Println("after the launches:", binary.LittleEndian.Uint32(out))
	fmt.Println("graph memory:", c.Pool().Usage().Reserved>>20, "MiB")

	x.Destroy()
	if err := c.Release(s); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("after Release:", c.Pool().Usage().Reserved)
	// Output:
	// before any launch: 0
	// after the launches: 1042
	// graph memory: 2 MiB
	// after Release: 0
}
