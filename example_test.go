package streamalloc_test

import (
	"fmt"

	"github.com/streamalloc/streamalloc"
	"github.com/streamalloc/streamalloc/buf"
)

// One call sets up a pool over the driver's stream-ordered allocator on
// device 0, with statistics, as the device's current resource: buffers
// made without a resource come from it.
func ExampleSetup() {
	h, err := streamalloc.Setup(streamalloc.Config{
		Backend: "sim", // "auto" (the default) uses the GPU when there is one
		Stats:   true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close()
	dev, _ := h.Device(0)
	s, err := dev.NewStream()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Destroy()

	v, err := buf.NewVector[float32](nil, 1<<20, s) // nil: the current resource
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := v.CopyFromHost(make([]float32, 1<<20)); err != nil {
		fmt.Println(err)
	}
	fmt.Println(h) // one line per device; h.Summary() has the whole table
	if err := v.Close(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// device 0: stats > retry > pool > async: reserved 32.0 MiB (peak 32.0 MiB), used 4.0 MiB (peak 4.0 MiB)
}
