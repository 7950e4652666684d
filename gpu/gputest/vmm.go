// Conformance of virtual memory (gpu.VirtualMemory): reservations grown
// and shrunk granule by granule, data across mappings of different
// physical allocations, a physical allocation moved from one place to
// another with its bytes, capacity, typed errors for bad calls, and many
// goroutines at once. Nothing here touches an unmapped page: on the card
// that fault poisons the context (the simulator's own tests check that it
// is reported).

package gputest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// RunVirtualMemory runs the virtual-memory suite on dev as subtests of t;
// dev must implement gpu.VirtualMemory.
func RunVirtualMemory(t *testing.T, dev gpu.Device) {
	t.Helper()
	vm, err := gpu.VirtualMemoryOf(dev)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		fn   func(*testing.T, gpu.Device, gpu.VirtualMemory)
	}{
		{"Granularity", testVMGranularity},
		{"GrowShrink", testVMGrowShrink},
		{"Handoff", testVMHandoff},
		{"Capacity", testVMCapacity},
		{"BadInput", testVMBadInput},
		{"Concurrent", testVMConcurrent},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, dev, vm) })
	}
}

func granule(t *testing.T, vm gpu.VirtualMemory) uint64 {
	t.Helper()
	g, err := vm.Granularity(false)
	must(t, err)
	return g
}

// reserve reserves n granules, freed (after unmapping what is left
// mapped, by the test) at cleanup.
func reserve(t *testing.T, vm gpu.VirtualMemory, size uint64) gpu.DevicePtr {
	t.Helper()
	p, err := vm.ReserveAddress(size, 0)
	must(t, err)
	t.Cleanup(func() {
		if err := vm.FreeAddress(p, size); err != nil {
			t.Errorf("cleanup: free reservation: %v", err)
		}
	})
	return p
}

// mapNew creates a physical allocation of size bytes, maps it at p, makes
// it accessible and releases the handle, so that its memory goes with the
// mapping.
func mapNew(t *testing.T, vm gpu.VirtualMemory, p gpu.DevicePtr, size uint64) {
	t.Helper()
	h, err := vm.CreatePhysical(size)
	must(t, err)
	must(t, vm.Map(p, size, h, 0))
	must(t, vm.ReleasePhysical(h))
	must(t, vm.SetAccess(p, size))
}

func testVMGranularity(t *testing.T, _ gpu.Device, vm gpu.VirtualMemory) {
	g := granule(t, vm)
	rec, err := vm.Granularity(true)
	must(t, err)
	if g == 0 || g&(g-1) != 0 {
		t.Fatalf("minimum granularity %d is not a power of two", g)
	}
	if rec < g || rec%g != 0 {
		t.Fatalf("recommended granularity %d is not a multiple of the minimum %d", rec, g)
	}
}

// testVMGrowShrink grows a reservation by one mapping at a time, fills and
// checks ranges that span mappings, unmaps the tail in stream order (after
// an event) and checks that what stays mapped kept its data.
func testVMGrowShrink(t *testing.T, dev gpu.Device, vm gpu.VirtualMemory) {
	g := granule(t, vm)
	const maxGranules = 8
	p := reserve(t, vm, maxGranules*g)
	s := newStream(t, dev)
	k := load(t, dev)
	errs := newCounter(t, dev, s)
	words := func(n uint64) int { return int(n / 4) }

	// Grow: 1, then 2, then 1 granule more, each time filling the whole
	// mapped range, then checking it.
	mapped := uint64(0)
	for step, n := range []uint64{1, 2, 1} {
		mapNew(t, vm, p+gpu.DevicePtr(mapped), n*g)
		mapped += n * g
		seed := uint32(100 * (step + 1))
		must(t, k.Fill(s, p, words(mapped), seed))
		must(t, k.Check(s, p, words(mapped), seed, errs.p))
		if c := errs.read(t, s); c != 0 {
			t.Fatalf("grow step %d (%d granules mapped): %d words wrong", step, mapped/g, c)
		}
	}
	// A copy across the boundary of the first two mappings reads back what
	// the kernel wrote.
	back := make([]byte, 4096)
	must(t, dev.CopyDtoHAsync(back, p+gpu.DevicePtr(g)-2048, s))
	must(t, s.Synchronize())
	checkPattern(t, "copy across a mapping boundary", back, 300+uint32((g-2048)/4))

	// Shrink: the last mapping (one granule) after an event says the
	// stream's work on it is done; then the two before it.
	e := newEvent(t, dev, false)
	must(t, k.Fill(s, p, words(mapped), 7))
	must(t, e.Record(s))
	must(t, e.Synchronize())
	must(t, vm.Unmap(p+gpu.DevicePtr(3*g), g))
	must(t, vm.Unmap(p+gpu.DevicePtr(g), 2*g))
	must(t, k.Check(s, p, words(g), 7, errs.p))
	if c := errs.read(t, s); c != 0 {
		t.Fatalf("after shrinking to one granule: %d words wrong", c)
	}
	// Grow again over the freed tail: new memory, filled and checked.
	mapNew(t, vm, p+gpu.DevicePtr(g), 3*g)
	must(t, k.Fill(s, p, words(4*g), 9))
	must(t, k.Check(s, p, words(4*g), 9, errs.p))
	must(t, dev.MemsetD8Async(p+gpu.DevicePtr(g)-1, 0xab, 2, s))
	must(t, dev.CopyDtoHAsync(back[:2], p+gpu.DevicePtr(g)-1, s))
	if c := errs.read(t, s); c != 0 {
		t.Fatalf("after growing again: %d words wrong", c)
	}
	if back[0] != 0xab || back[1] != 0xab {
		t.Fatalf("memset across a mapping boundary read back %x", back[:2])
	}
	must(t, vm.Unmap(p, g))
	must(t, vm.Unmap(p+gpu.DevicePtr(g), 3*g))
}

// testVMHandoff moves a physical allocation from one reservation to
// another (unmap, then map elsewhere): the bytes go with it. Two
// reservations stand for two streams' ranges.
func testVMHandoff(t *testing.T, dev gpu.Device, vm gpu.VirtualMemory) {
	g := granule(t, vm)
	a := reserve(t, vm, 2*g)
	b := reserve(t, vm, 2*g)
	s1 := newStream(t, dev)
	s2 := newStream(t, dev)
	k := load(t, dev)
	errs := newCounter(t, dev, s2)
	must(t, s2.Synchronize())

	h, err := vm.CreatePhysical(g)
	must(t, err)
	must(t, vm.Map(a+gpu.DevicePtr(g), g, h, 0))
	must(t, vm.SetAccess(a+gpu.DevicePtr(g), g))
	must(t, k.Fill(s1, a+gpu.DevicePtr(g), int(g/4), 42))
	e := newEvent(t, dev, false)
	must(t, e.Record(s1))
	must(t, e.Synchronize())
	must(t, vm.Unmap(a+gpu.DevicePtr(g), g))
	must(t, vm.Map(b, g, h, 0))
	must(t, vm.SetAccess(b, g))
	must(t, vm.ReleasePhysical(h))
	must(t, k.Check(s2, b, int(g/4), 42, errs.p))
	if c := errs.read(t, s2); c != 0 {
		t.Fatalf("handed-off granule: %d words wrong", c)
	}
	// The same allocation mapped at two places shows the same bytes.
	h2, err := vm.CreatePhysical(g)
	must(t, err)
	must(t, vm.Map(a, g, h2, 0))
	must(t, vm.Map(b+gpu.DevicePtr(g), g, h2, 0))
	must(t, vm.ReleasePhysical(h2))
	must(t, vm.SetAccess(a, g))
	must(t, vm.SetAccess(b+gpu.DevicePtr(g), g))
	must(t, k.Fill(s2, a, int(g/4), 5))
	must(t, k.Check(s2, b+gpu.DevicePtr(g), int(g/4), 5, errs.p))
	if c := errs.read(t, s2); c != 0 {
		t.Fatalf("one allocation at two addresses: %d words differ", c)
	}
	must(t, vm.Unmap(a, g))
	must(t, vm.Unmap(b, g))
	must(t, vm.Unmap(b+gpu.DevicePtr(g), g))
}

// testVMCapacity: a physical allocation takes device memory, reservations
// do not, and memory comes back when a released allocation is unmapped.
func testVMCapacity(t *testing.T, dev gpu.Device, vm gpu.VirtualMemory) {
	g := granule(t, vm)
	size := 32 * g
	free0, _, err := dev.MemGetInfo()
	must(t, err)
	p := reserve(t, vm, 4*size)
	h, err := vm.CreatePhysical(size)
	must(t, err)
	must(t, vm.Map(p, size, h, 0))
	must(t, vm.SetAccess(p, size))
	free1, _, err := dev.MemGetInfo()
	must(t, err)
	if free0 < free1+size {
		t.Errorf("free memory %d before, %d with %d bytes created: want a drop of at least the size", free0, free1, size)
	}
	must(t, vm.ReleasePhysical(h))
	free2, _, err := dev.MemGetInfo()
	must(t, err)
	if free2 > free1+g {
		t.Errorf("released but still mapped: free %d, was %d: the memory went before its mapping", free2, free1)
	}
	must(t, vm.Unmap(p, size))
	free3, _, err := dev.MemGetInfo()
	must(t, err)
	if free3 < free2+size {
		t.Errorf("unmapped and released: free %d, was %d: want at least %d back", free3, free2, size)
	}
}

func testVMBadInput(t *testing.T, dev gpu.Device, vm gpu.VirtualMemory) {
	g := granule(t, vm)
	_, err := vm.ReserveAddress(g+1, 0)
	wantErr(t, "ReserveAddress(granule+1)", err, gpu.ErrInvalidValue)
	_, err = vm.CreatePhysical(g + 1)
	wantErr(t, "CreatePhysical(granule+1)", err, gpu.ErrInvalidValue)
	_, err = vm.CreatePhysical(1 << 50)
	wantErr(t, "CreatePhysical(1 PiB)", err, gpu.ErrOutOfMemory)
	wantErr(t, "ReleasePhysical(0)", vm.ReleasePhysical(0), gpu.ErrInvalidValue)

	p := reserve(t, vm, 4*g)
	h, err := vm.CreatePhysical(2 * g)
	must(t, err)
	defer func() { must(t, vm.ReleasePhysical(h)) }()
	wantErr(t, "Map(null handle)", vm.Map(p, g, 0, 0), gpu.ErrInvalidValue)
	// cuMemMap answers a range it cannot map with CUDA_ERROR_NOT_SUPPORTED
	// (driver 580 on an H100), not INVALID_VALUE.
	wantErr(t, "Map at an unaligned address", vm.Map(p+1, g, h, 0), gpu.ErrNotSupported)
	wantErr(t, "Map at an unaligned offset", vm.Map(p, g, h, 1), gpu.ErrNotSupported)
	wantErr(t, "Map past the allocation's end", vm.Map(p, 2*g, h, g), gpu.ErrNotSupported)
	wantErr(t, "SetAccess of an unmapped range", vm.SetAccess(p, g), gpu.ErrInvalidValue)
	must(t, vm.Map(p, 2*g, h, 0))
	wantErr(t, "Map over a mapped granule", vm.Map(p+gpu.DevicePtr(g), g, h, 0), gpu.ErrNotSupported)
	wantErr(t, "Unmap of part of a mapping", vm.Unmap(p, g), gpu.ErrInvalidValue)
	wantErr(t, "FreeAddress with the wrong size", vm.FreeAddress(p, g), gpu.ErrInvalidValue)
	must(t, vm.SetAccess(p, 2*g))
	// The mapping still works after the refused calls.
	s := newStream(t, dev)
	k := load(t, dev)
	errs := newCounter(t, dev, s)
	must(t, k.Fill(s, p, int(2*g/4), 3))
	must(t, k.Check(s, p, int(2*g/4), 3, errs.p))
	if c := errs.read(t, s); c != 0 {
		t.Fatalf("after refused calls: %d words wrong", c)
	}
	must(t, vm.Unmap(p, 2*g))
}

// testVMConcurrent: 16 goroutines each grow a reservation of their own on
// a stream of their own, fill and check it, shrink it and free it.
func testVMConcurrent(t *testing.T, dev gpu.Device, vm gpu.VirtualMemory) {
	g := granule(t, vm)
	k := load(t, dev)
	const workers = 16
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- vmWorker(dev, vm, k, g, uint32(w))
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Error(err)
		}
	}
}

// vmWorker is one goroutine of testVMConcurrent; it cleans up after
// itself on every path it can.
func vmWorker(dev gpu.Device, vm gpu.VirtualMemory, k interface {
	Fill(gpu.Stream, gpu.DevicePtr, int, uint32) error
	Check(gpu.Stream, gpu.DevicePtr, int, uint32, gpu.DevicePtr) error
}, g uint64, w uint32) (err error) {
	fail := func(what string, e error) error { return fmt.Errorf("worker %d: %s: %w", w, what, e) }
	s, err := dev.NewStream()
	if err != nil {
		return fail("stream", err)
	}
	defer func() {
		if e := s.Destroy(); e != nil && err == nil {
			err = fail("destroy stream", e)
		}
	}()
	cnt, err := dev.MallocAsync(4, s)
	if err != nil {
		return fail("counter", err)
	}
	defer func() {
		if e := dev.FreeAsync(cnt, s); e != nil && err == nil {
			err = fail("free counter", e)
		}
		if e := s.Synchronize(); e != nil && err == nil {
			err = fail("synchronize", e)
		}
	}()
	if err := dev.MemsetD8Async(cnt, 0, 4, s); err != nil {
		return fail("memset", err)
	}
	p, err := vm.ReserveAddress(4*g, 0)
	if err != nil {
		return fail("reserve", err)
	}
	defer func() {
		if e := vm.FreeAddress(p, 4*g); e != nil && err == nil {
			err = fail("free reservation", e)
		}
	}()
	for i := range uint64(2) {
		h, err := vm.CreatePhysical(g)
		if err != nil {
			return fail("create", err)
		}
		err = vm.Map(p+gpu.DevicePtr(i*g), g, h, 0)
		if e := vm.ReleasePhysical(h); e != nil && err == nil {
			err = e
		}
		if err != nil {
			return fail("map", err)
		}
		defer func() {
			if e := vm.Unmap(p+gpu.DevicePtr(i*g), g); e != nil && err == nil {
				err = fail("unmap", e)
			}
		}()
		if err := vm.SetAccess(p+gpu.DevicePtr(i*g), g); err != nil {
			return fail("set access", err)
		}
	}
	n := int(2 * g / 4)
	if err := k.Fill(s, p, n, 1000*w); err != nil {
		return fail("fill", err)
	}
	if err := k.Check(s, p, n, 1000*w, cnt); err != nil {
		return fail("check", err)
	}
	var b [4]byte
	if err := dev.CopyDtoHAsync(b[:], cnt, s); err != nil {
		return fail("read count", err)
	}
	// The unmaps (deferred) come after the stream has finished with the
	// pages.
	if err := s.Synchronize(); err != nil {
		return fail("synchronize", err)
	}
	if c := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24; c != 0 {
		return fmt.Errorf("worker %d: %d words wrong", w, c)
	}
	return nil
}
