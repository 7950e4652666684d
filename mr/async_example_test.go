package mr_test

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// A producer stream allocates buffers that a consumer stream frees. By
// default the producer then waits for the consumer, and the driver's pool
// gives it the freed buffer back; with NoReturnWait the producer runs on,
// and the pool grows while the consumer still holds freed buffers.
func ExampleAsyncOptions_noReturnWait() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	for _, noWait := range []bool{false, true} {
		producer, _ := dev.NewStream()
		consumer, _ := dev.NewStream()
		r, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true, NoReturnWait: noWait})
		if err != nil {
			fmt.Println(err)
			return
		}
		// The consumer is busy (a long kernel), so its frees do not run yet.
		release := dev.(*sim.Device).Hold(consumer)
		var first, last gpu.DevicePtr
		for i := range 64 {
			p, _ := r.Allocate(1<<20, producer)
			if i == 0 {
				first = p
			}
			last = p
			r.Deallocate(p, 1<<20, consumer) // ordered after the producer's work
		}
		release()
		fmt.Printf("NoReturnWait %v: same buffer every time %v, pool peak %d MiB\n",
			noWait, first == last, r.Usage().PeakReserved>>20)
		producer.Synchronize()
		consumer.Synchronize()
		r.Close()
		producer.Destroy()
		consumer.Destroy()
	}
	// Output:
	// NoReturnWait false: same buffer every time true, pool peak 32 MiB
	// NoReturnWait true: same buffer every time false, pool peak 64 MiB
}
