package cuda_test

import (
	"errors"
	"fmt"

	"github.com/streamalloc/streamalloc/cuda"
)

// Allocate and free in stream order through the driver. Without a GPU the
// first call says why, and nothing else is tried.
func Example() {
	if err := cuda.Init(); err != nil {
		fmt.Println("no GPU:", errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice))
		return
	}
	dev, err := cuda.GetDevice(0)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, err := dev.PrimaryCtxRetain()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.PrimaryCtxRelease()
	s, err := ctx.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ctx.StreamDestroy(s)
	p, err := ctx.MemAllocAsync(1<<20, s)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = ctx.MemsetD8Async(p, 0, 1<<20, s)
	_ = ctx.MemFreeAsync(p, s)
	if err := ctx.StreamSynchronize(s); err != nil {
		fmt.Println(err)
	}
}

// Kernel arguments are appended in the order of the kernel's parameters.
func ExampleParams() {
	var p cuda.Params
	p.Ptr(0x7f0000000000) // .param .u64 ptr
	p.U64(1024)           // .param .u64 n
	p.U32(42)             // .param .u32 seed
	fmt.Println(p.Len())
	// Output: 3
}
