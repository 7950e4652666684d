package sim_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu/sim"
)

// BenchmarkMallocAsyncFreeAsync is a stream-ordered allocation and free
// on one stream: the cost of the simulated driver pool.
func BenchmarkMallocAsyncFreeAsync(b *testing.B) {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	b.ReportAllocs()
	for b.Loop() {
		p, err := dev.MallocAsync(1<<20, s)
		if err != nil {
			b.Fatal(err)
		}
		if err := dev.FreeAsync(p, s); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Synchronize(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRecordWait is an event record on one stream and a wait on
// another.
func BenchmarkRecordWait(b *testing.B) {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s1, _ := dev.NewStream()
	s2, _ := dev.NewStream()
	e, _ := dev.NewEvent(false)
	b.ReportAllocs()
	for b.Loop() {
		if err := e.Record(s1); err != nil {
			b.Fatal(err)
		}
		if err := s2.WaitEvent(e); err != nil {
			b.Fatal(err)
		}
	}
	if err := dev.Synchronize(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkMemset is a 1 MiB set, enqueued and synchronized.
func BenchmarkMemset(b *testing.B) {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	p, _ := dev.Malloc(1 << 20)
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	for b.Loop() {
		if err := dev.MemsetD8Async(p, 1, 1<<20, s); err != nil {
			b.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMallocManyLive is cuMemAlloc+cuMemFree with 20000 other
// allocations live: the cost of the address index as allocations pile up.
func BenchmarkMallocManyLive(b *testing.B) {
	dev, _ := sim.New(sim.Config{}).Device(0)
	for range 20000 {
		if _, err := dev.Malloc(4096); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		p, err := dev.Malloc(4096)
		if err != nil {
			b.Fatal(err)
		}
		if err := dev.Free(p); err != nil {
			b.Fatal(err)
		}
	}
}
