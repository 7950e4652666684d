// Conformance of managed memory (gpu.ManagedMemory) and host-located
// pools (gpu.HostMemPools): prefetch around kernels that write and check
// a pattern, advice, a managed pool's memory through kernels, a host pool's
// memory through copies with reuse on several streams, and typed errors
// for bad calls. What the card cannot report (page faults) is left to the
// simulator's own tests; this suite asserts data and errors.
//
// Managed allocations here are a few MiB: the card must never be asked
// for more managed memory than it has free.

package gputest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// RunManaged runs the managed-memory and host-pool suite on dev as
// subtests of t; dev must implement gpu.ManagedMemory and
// gpu.HostMemPools.
func RunManaged(t *testing.T, dev gpu.Device) {
	t.Helper()
	mm, err := gpu.ManagedMemoryOf(dev)
	if err != nil {
		t.Fatal(err)
	}
	hp, err := gpu.HostMemPoolsOf(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("PrefetchKernel", func(t *testing.T) { testPrefetchKernel(t, dev, mm) })
	t.Run("Advice", func(t *testing.T) { testAdvice(t, dev, mm) })
	t.Run("ManagedPool", func(t *testing.T) { testManagedPool(t, dev, mm) })
	t.Run("ManagedBadInput", func(t *testing.T) { testManagedBadInput(t, dev, mm) })
	t.Run("HostPool", func(t *testing.T) { testHostMemPool(t, dev, hp) })
	t.Run("HostPoolBadInput", func(t *testing.T) { testHostMemPoolBadInput(t, dev, hp) })
}

// checkOnDevice checks n words at p against Fill's pattern of seed on s.
func checkOnDevice(t *testing.T, dev gpu.Device, s gpu.Stream, p gpu.DevicePtr, n int, seed uint32) {
	t.Helper()
	k := load(t, dev)
	errs, err := dev.MallocAsync(4, s)
	must(t, err)
	must(t, dev.MemsetD8Async(errs, 0, 4, s))
	must(t, k.Check(s, p, n, seed, errs))
	var got [4]byte
	must(t, dev.CopyDtoHAsync(got[:], errs, s))
	must(t, dev.FreeAsync(errs, s))
	must(t, s.Synchronize())
	if bad := uint32(got[0]) | uint32(got[1])<<8 | uint32(got[2])<<16 | uint32(got[3])<<24; bad != 0 {
		t.Fatalf("%d of %d words at %#x do not hold pattern %d", bad, n, uint64(p), seed)
	}
}

// testPrefetchKernel: managed memory prefetched to the device, written by
// a kernel, prefetched to the host and copied back; then written by the
// host's copy and checked by a kernel without a prefetch.
func testPrefetchKernel(t *testing.T, dev gpu.Device, mm gpu.ManagedMemory) {
	const size = 4 << 20
	s := newStream(t, dev)
	k := load(t, dev)
	m, err := dev.MallocManaged(size)
	must(t, err)
	defer func() { must(t, dev.Free(m)) }()
	here := gpu.DeviceLocation(dev.Ordinal())
	must(t, mm.PrefetchAsync(m, size, here, s))
	must(t, k.Fill(s, m, size/4, 7))
	must(t, mm.PrefetchAsync(m, size, gpu.HostLocation(), s))
	back := make([]byte, size)
	must(t, dev.CopyDtoHAsync(back, m, s))
	must(t, s.Synchronize())
	for i := 0; i < size/4; i += 4093 {
		if got := uint32(back[4*i]) | uint32(back[4*i+1])<<8 | uint32(back[4*i+2])<<16 | uint32(back[4*i+3])<<24; got != 7+uint32(i) {
			t.Fatalf("word %d = %d after prefetch to the host, want %d", i, got, 7+uint32(i))
		}
	}
	checkOnDevice(t, dev, s, m, size/4, 7)
	// An interior, unaligned range prefetches too: the driver rounds it.
	must(t, mm.PrefetchAsync(m+4097, 12345, here, s))
	must(t, s.Synchronize())
}

// testAdvice: every advice on a managed range, then kernels still see the
// data; read-mostly advice with a location it ignores is accepted.
func testAdvice(t *testing.T, dev gpu.Device, mm gpu.ManagedMemory) {
	const size = 2 << 20
	s := newStream(t, dev)
	k := load(t, dev)
	m, err := dev.MallocManaged(size)
	must(t, err)
	defer func() { must(t, dev.Free(m)) }()
	here := gpu.DeviceLocation(dev.Ordinal())
	must(t, k.Fill(s, m, size/4, 3))
	must(t, s.Synchronize())
	for _, c := range []struct {
		a   gpu.Advice
		loc gpu.Location
	}{
		{gpu.AdviseSetReadMostly, here},
		{gpu.AdviseSetPreferredLocation, gpu.HostLocation()},
		{gpu.AdviseSetAccessedBy, here},
		{gpu.AdviseUnsetAccessedBy, here},
		{gpu.AdviseUnsetPreferredLocation, here},
		{gpu.AdviseSetPreferredLocation, here},
		{gpu.AdviseUnsetReadMostly, here},
		// Read-mostly advice takes no location: a zero Location is
		// ignored, not refused.
		{gpu.AdviseSetReadMostly, gpu.Location{}},
		{gpu.AdviseUnsetReadMostly, gpu.Location{}},
		{gpu.AdviseSetReadMostly, gpu.DeviceLocation(99)},
		{gpu.AdviseUnsetReadMostly, gpu.Location{Kind: 7}},
	} {
		if err := mm.Advise(m, size, c.a, c.loc); err != nil {
			t.Fatalf("Advise(%v, %v): %v", c.a, c.loc, err)
		}
		checkOnDevice(t, dev, s, m, size/4, 3)
	}
}

// testManagedPool: stream-ordered managed memory from a managed pool,
// prefetched, written and checked by kernels, on 4 goroutines.
func testManagedPool(t *testing.T, dev gpu.Device, mm gpu.ManagedMemory) {
	pool, err := mm.NewManagedPool()
	if errors.Is(err, gpu.ErrNotSupported) {
		t.Skipf("the driver has no managed pools: %v", err)
	}
	must(t, err)
	defer func() { must(t, pool.Destroy()) }()
	here := gpu.DeviceLocation(dev.Ordinal())
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for g := range 4 {
		s := newStream(t, dev)
		k := load(t, dev)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				n := (1 + i%3) << 20
				p, err := dev.MallocFromPoolAsync(n, pool, s)
				if err != nil {
					errc <- err
					return
				}
				if err := mm.PrefetchAsync(p, n, here, s); err != nil {
					errc <- fmt.Errorf("prefetch pool memory: %w", err)
					return
				}
				seed := uint32(100*g + i)
				if err := k.Fill(s, p, n/4, seed); err != nil {
					errc <- err
					return
				}
				back := make([]byte, 8)
				if err := dev.CopyDtoHAsync(back, p+gpu.DevicePtr(n-8), s); err != nil {
					errc <- err
					return
				}
				if err := dev.FreeAsync(p, s); err != nil {
					errc <- err
					return
				}
				if err := s.Synchronize(); err != nil {
					errc <- err
					return
				}
				want := seed + uint32(n/4-1)
				if got := uint32(back[4]) | uint32(back[5])<<8 | uint32(back[6])<<16 | uint32(back[7])<<24; got != want {
					errc <- fmt.Errorf("goroutine %d round %d: last word %d, want %d", g, i, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	used, err := pool.Attribute(gpu.PoolUsedMemCurrent)
	must(t, err)
	if used != 0 {
		t.Errorf("managed pool: %d bytes used after every free", used)
	}
}

func testManagedBadInput(t *testing.T, dev gpu.Device, mm gpu.ManagedMemory) {
	s := newStream(t, dev)
	m, err := dev.MallocManaged(1 << 20)
	must(t, err)
	defer func() { must(t, dev.Free(m)) }()
	d, err := dev.Malloc(1 << 20)
	must(t, err)
	defer func() { must(t, dev.Free(d)) }()
	here := gpu.DeviceLocation(dev.Ordinal())
	for _, c := range []struct {
		what string
		err  error
		want error
	}{
		{"prefetch of device memory", mm.PrefetchAsync(d, 4096, here, s), gpu.ErrInvalidValue},
		{"prefetch of 0 bytes", mm.PrefetchAsync(m, 0, here, s), gpu.ErrInvalidValue},
		{"prefetch of a negative size", mm.PrefetchAsync(m, -1, here, s), gpu.ErrInvalidValue},
		{"prefetch to location kind 9", mm.PrefetchAsync(m, 4096, gpu.Location{Kind: 9}, s), gpu.ErrInvalidValue},
		{"prefetch to device 99", mm.PrefetchAsync(m, 4096, gpu.DeviceLocation(99), s), gpu.ErrInvalidDevice},
		{"prefetch on a nil stream", mm.PrefetchAsync(m, 4096, here, nil), gpu.ErrInvalidHandle},
		{"advice 42", mm.Advise(m, 4096, gpu.Advice(42), here), gpu.ErrInvalidValue},
		{"advice on device memory", mm.Advise(d, 4096, gpu.AdviseSetReadMostly, here), gpu.ErrInvalidValue},
		{"preferred location kind 0", mm.Advise(m, 4096, gpu.AdviseSetPreferredLocation, gpu.Location{}), gpu.ErrInvalidValue},
		{"accessed by device 99", mm.Advise(m, 4096, gpu.AdviseSetAccessedBy, gpu.DeviceLocation(99)), gpu.ErrInvalidDevice},
	} {
		wantErr(t, c.what, c.err, c.want)
	}
	// The stream still works.
	must(t, dev.MemsetD8Async(m, 1, 1<<20, s))
	must(t, s.Synchronize())
}

// testHostMemPool: pinned host memory from a host-located pool, filled by
// the host, copied to the device and back through a second buffer, freed
// in stream order and allocated again, on 4 goroutines with a stream each.
func testHostMemPool(t *testing.T, dev gpu.Device, hp gpu.HostMemPools) {
	pool, err := hp.NewHostMemPool(gpu.HostLocation())
	must(t, err)
	defer func() { must(t, pool.Destroy()) }()
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for g := range 4 {
		s := newStream(t, dev)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- hostPoolRounds(dev, hp, pool, s, g)
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Error(err)
		}
	}
	used, err := pool.Attribute(gpu.PoolUsedMemCurrent)
	must(t, err)
	if used != 0 {
		t.Errorf("host pool: %d bytes used after every free", used)
	}
	res, err := pool.Attribute(gpu.PoolReservedMemHigh)
	must(t, err)
	if res < 64<<10 {
		t.Errorf("host pool: reserved high-water %d, want at least the 64 KiB allocated", res)
	}
	must(t, pool.TrimTo(0))
}

func hostPoolRounds(dev gpu.Device, hp gpu.HostMemPools, pool gpu.MemPool, s gpu.Stream, g int) error {
	const n = 64<<10 + 3
	d, err := dev.MallocAsync(n, s)
	if err != nil {
		return err
	}
	for i := range 10 {
		src, err := hp.MallocHostFromPoolAsync(n, pool, s)
		if err != nil {
			return err
		}
		dst, err := hp.MallocHostFromPoolAsync(n, pool, s)
		if err != nil {
			return err
		}
		if len(src) != n || len(dst) != n {
			return fmt.Errorf("host pool returned %d and %d bytes, want %d", len(src), len(dst), n)
		}
		if err := s.Synchronize(); err != nil { // the host may touch them now
			return err
		}
		for j := range src {
			src[j] = byte(j*7 + i + g)
		}
		if err := dev.CopyHtoDAsync(d, src, s); err != nil {
			return err
		}
		if err := dev.CopyDtoHAsync(dst, d, s); err != nil {
			return err
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		if !bytes.Equal(src, dst) {
			return fmt.Errorf("goroutine %d round %d: bytes differ after a round trip through the device", g, i)
		}
		if err := hp.FreeHostAsync(src, s); err != nil {
			return err
		}
		if err := hp.FreeHostAsync(dst, s); err != nil {
			return err
		}
	}
	if err := dev.FreeAsync(d, s); err != nil {
		return err
	}
	return s.Synchronize()
}

func testHostMemPoolBadInput(t *testing.T, dev gpu.Device, hp gpu.HostMemPools) {
	s := newStream(t, dev)
	_, err := hp.NewHostMemPool(gpu.DeviceLocation(dev.Ordinal()))
	wantErr(t, "host pool at a device", err, gpu.ErrInvalidValue)
	_, err = hp.NewHostMemPool(gpu.Location{Kind: 9})
	wantErr(t, "host pool at location kind 9", err, gpu.ErrInvalidValue)
	pool, err := hp.NewHostMemPool(gpu.HostLocation())
	must(t, err)
	defer func() { must(t, pool.Destroy()) }()
	devPool, err := dev.NewMemPool()
	must(t, err)
	defer func() { must(t, devPool.Destroy()) }()
	_, err = hp.MallocHostFromPoolAsync(4096, devPool, s)
	wantErr(t, "host allocation from a device pool", err, gpu.ErrInvalidValue)
	_, err = dev.MallocFromPoolAsync(4096, pool, s)
	wantErr(t, "device allocation from a host pool", err, gpu.ErrInvalidValue)
	_, err = hp.MallocHostFromPoolAsync(0, pool, s)
	wantErr(t, "0 bytes", err, gpu.ErrInvalidValue)
	_, err = hp.MallocHostFromPoolAsync(4096, nil, s)
	wantErr(t, "nil pool", err, gpu.ErrInvalidHandle)
	wantErr(t, "free of Go memory", hp.FreeHostAsync(make([]byte, 64), s), gpu.ErrInvalidValue)
	b, err := hp.MallocHostFromPoolAsync(8192, pool, s)
	must(t, err)
	wantErr(t, "free of part of an allocation", hp.FreeHostAsync(b[:4096], s), gpu.ErrInvalidValue)
	wantErr(t, "free on a nil stream", hp.FreeHostAsync(b, nil), gpu.ErrInvalidHandle)
	must(t, hp.FreeHostAsync(b, s))
	wantErr(t, "double free", hp.FreeHostAsync(b, s), gpu.ErrInvalidValue)
	must(t, s.Synchronize())
}
