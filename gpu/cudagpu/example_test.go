package cudagpu_test

import (
	"errors"
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/cudagpu"
)

// Open the CUDA backend and allocate in stream order on device 0. Without
// a driver Open says so, with an error matching gpu.ErrNoDriver.
func ExampleOpen() {
	b, err := cudagpu.Open()
	if errors.Is(err, gpu.ErrNoDriver) || errors.Is(err, gpu.ErrNoDevice) {
		fmt.Println("no GPU here")
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	dev, err := b.Device(0)
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := dev.NewStream()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Destroy()
	p, err := dev.MallocAsync(1<<20, s)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = dev.FreeAsync(p, s)
	_ = s.Synchronize()
}
