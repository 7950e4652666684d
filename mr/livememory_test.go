package mr_test

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// heapNow returns the live heap after a collection.
func heapNow() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// A large live set costs every resource a bounded amount of time and host
// memory per allocation: 30,000 live 256-byte blocks on one stream take
// about a second and under 1.5 KiB of heap each, the simulator's share
// included. (Direct took 54 s and 1.14 GB for a million: the simulator's
// address index copied the list of every allocation in the same 2 MiB on
// each one; Async took minutes: the driver pool's model walked every block
// of every chunk to coalesce on each allocation. gpu/sim's
// TestLargeLiveSetCosts checks both structures.)
func TestLargeLiveSet(t *testing.T) {
	const n = 30_000
	for _, tc := range []struct {
		name string
		make func(gpu.Device) mr.Resource
	}{
		{"direct", func(dev gpu.Device) mr.Resource { return mr.NewDirect(dev) }},
		{"async", func(dev gpu.Device) mr.Resource { return resMust(mr.NewAsync(dev, mr.AsyncOptions{})) }},
		{"pool", func(dev gpu.Device) mr.Resource { return resMust(mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})) }},
		{"arena", func(dev gpu.Device) mr.Resource {
			return resMust(mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := resDevice(t, sim.Config{})
			r := tc.make(dev)
			s := resStream(t, dev)
			before := heapNow()
			start := time.Now()
			ps := make([]gpu.DevicePtr, n)
			for i := range ps {
				p, err := r.Allocate(256, s)
				if err != nil {
					t.Fatalf("allocation %d: %v", i, err)
				}
				ps[i] = p
			}
			per := (int64(heapNow()) - int64(before) - int64(n*8)) / n
			for _, p := range ps {
				if err := r.Deallocate(p, 256, s); err != nil {
					t.Fatal(err)
				}
			}
			d := time.Since(start)
			t.Logf("%d live blocks: %v, %d bytes of heap each", n, d, per)
			if d > 10*time.Second {
				t.Errorf("%d live blocks took %v", n, d)
			}
			if per > 1536 {
				t.Errorf("%d bytes of heap per live block, want under 1.5 KiB", per)
			}
			resReleaseAll(t, dev, r, s)
		})
	}
}

// An Arena's host memory follows its live blocks, not the device memory it
// holds: a device full of 1 MiB blocks costs well under 4 KiB of heap per
// block (each 4 MiB superblock kept a mark per 256 bytes, 64 KiB, 16 KiB per
// block), and requests refused once it is full keep nothing and do not try
// every superblock under its lock.
func TestArenaHostMemoryWhenFull(t *testing.T) {
	dev := resDevice(t, sim.Config{Capacity: 1 << 30})
	r := resMust(mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{}))
	s := resStream(t, dev)
	before := heapNow()
	var ps []gpu.DevicePtr
	for {
		p, err := r.Allocate(1<<20, s)
		if errors.Is(err, mr.ErrOutOfMemory) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if len(ps) < 900 {
		t.Fatalf("only %d blocks of 1 MiB fit in 1 GiB", len(ps))
	}
	full := heapNow()
	per := (int64(full) - int64(before)) / int64(len(ps))
	t.Logf("%d live 1 MiB blocks: %d bytes of heap each", len(ps), per)
	if per > 4<<10 {
		t.Errorf("%d bytes of heap per live 1 MiB block, want under 4 KiB", per)
	}
	for range 2000 {
		if _, err := r.Allocate(1<<20, s); !errors.Is(err, mr.ErrOutOfMemory) {
			t.Fatalf("allocation on a full device: %v, want out of memory", err)
		}
	}
	if grew := int64(heapNow()) - int64(full); grew > 64<<10 {
		t.Errorf("2000 refused requests kept %d bytes", grew)
	}
	for _, p := range ps {
		if err := r.Deallocate(p, 1<<20, s); err != nil {
			t.Fatal(err)
		}
	}
	resReleaseAll(t, dev, r, s)
}
