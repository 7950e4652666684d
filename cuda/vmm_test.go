package cuda_test

import "github.com/streamalloc/streamalloc/cuda"

// vmmEntryPoints are the virtual-memory wing's entry points, with
// stand-in handles like the others.
func vmmEntryPoints() []entryPoint {
	ctx := cuda.Context(1)
	dev := cuda.Device(0)
	first := func(_ any, err error) error { return err }
	const g = 2 << 20
	return []entryPoint{
		{"Context.MemAddressReserve", func() error { return first(ctx.MemAddressReserve(g, 0)) }},
		{"Context.MemAddressFree", func() error { return ctx.MemAddressFree(0x200000, g) }},
		{"Context.MemCreate", func() error { return first(ctx.MemCreate(dev, g)) }},
		{"Context.MemCreateExportable", func() error { return first(ctx.MemCreateExportable(dev, g, cuda.HandlePOSIX)) }},
		{"Context.MemRelease", func() error { return ctx.MemRelease(1) }},
		{"Context.MemExportFD", func() error { return first(ctx.MemExportFD(1)) }},
		{"Context.MemExportFabric", func() error { return first(ctx.MemExportFabric(1)) }},
		{"Context.MemImportFD", func() error { return first(ctx.MemImportFD(3)) }},
		{"Context.MemImportFabric", func() error { return first(ctx.MemImportFabric(cuda.IPCHandle{})) }},
		{"Context.MemMap", func() error { return ctx.MemMap(0x200000, g, 0, 1) }},
		{"Context.MemUnmap", func() error { return ctx.MemUnmap(0x200000, g) }},
		{"Context.MemSetAccess", func() error { return ctx.MemSetAccess(0x200000, g, dev) }},
		{"Context.MemAllocationGranularity", func() error {
			return first(ctx.MemAllocationGranularity(dev, cuda.GranularityRecommended))
		}},
		{"Context.MemAllocationGranularityExportable", func() error {
			return first(ctx.MemAllocationGranularityExportable(dev, cuda.GranularityMinimum, cuda.HandlePOSIX))
		}},
	}
}
