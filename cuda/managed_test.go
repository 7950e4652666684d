package cuda_test

import (
	"unsafe"

	"github.com/streamalloc/streamalloc/cuda"
)

// managedEntryPoints are the managed-memory wing's entry points, with
// stand-in handles like the others.
func managedEntryPoints() []entryPoint {
	ctx := cuda.Context(1)
	s := cuda.Stream(1)
	pool := cuda.MemPool(1)
	first := func(_ any, err error) error { return err }
	dev0 := cuda.Location{Type: cuda.LocationDevice, ID: 0}
	var host byte
	return []entryPoint{
		{"Context.MemPrefetchAsync", func() error { return ctx.MemPrefetchAsync(0x200000, 4096, dev0, s) }},
		{"Context.MemAdvise", func() error { return ctx.MemAdvise(0x200000, 4096, cuda.AdviseSetReadMostly, dev0) }},
		{"Context.MemPoolCreateAt", func() error {
			return first(ctx.MemPoolCreateAt(cuda.AllocPinned, cuda.Location{Type: cuda.LocationHost}))
		}},
		{"Context.MemAllocHostFromPoolAsync", func() error { return first(ctx.MemAllocHostFromPoolAsync(4096, pool, s)) }},
		{"Context.MemFreeHostAsync", func() error { return ctx.MemFreeHostAsync(unsafe.Pointer(&host), s) }},
	}
}
