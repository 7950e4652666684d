package mr_test

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// A kernel of device 1 writes memory a pool of device 0 handed out: the
// grant at the top of the stack reaches the driver pool at its bottom, so
// it covers the pool's chunks taken before it and after. Without it the
// kernel would fault (an illegal address, which on the card ends the
// context). Work of the two devices is ordered through the host here
// (each stream synchronized before the other device's work).
func ExampleGrantPeer() {
	be := sim.New(sim.Config{Devices: 2})
	dev0, _ := be.Device(0)
	dev1, _ := be.Device(1)
	s0, _ := dev0.NewStream()
	s1, _ := dev1.NewStream()
	k1, _ := kernels.Load(dev1)

	async, _ := mr.NewAsync(dev0, mr.AsyncOptions{OwnPool: true})
	pool, _ := mr.NewPool(async, mr.PoolOptions{})
	const words = 1024
	p, _ := pool.Allocate(4*words, s0)
	_ = s0.Synchronize()

	if err := mr.GrantPeer(pool, dev1, gpu.AccessReadWrite); err != nil {
		fmt.Println(err)
		return
	}
	_ = k1.Fill(s1, p, words, 7)
	fmt.Println("device 1's kernel:", s1.Synchronize())

	b := make([]byte, 4)
	_ = dev0.CopyDtoHAsync(b, p, s0)
	_ = s0.Synchronize()
	fmt.Println("device 0 reads:", b[0])
	_ = pool.Deallocate(p, 4*words, s0)
	_ = pool.Close()
	_ = async.Close()
	// Output:
	// device 1's kernel: <nil>
	// device 0 reads: 7
}
