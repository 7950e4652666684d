package mr_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
)

// poolVirtualModes are the Pool's placement options over a Virtual that
// waits for decommits, as the registry's pool_vmm, pool_vmm_holes and
// pool_vmm_holes_pair set them.
var poolVirtualModes = []struct {
	name string
	opts mr.PoolOptions
}{
	{"pool_vmm", mr.PoolOptions{SmallAtPeak: true}},
	{"pool_vmm_holes", mr.PoolOptions{PackHoles: true}},
	{"pool_vmm_holes_pair", mr.PoolOptions{PackHoles: true, HolesKeepPair: true, SmallAtPeak: true}},
}

// BenchmarkPoolVirtualPair: a pair (allocate, free, the same size again)
// served from the lists of a Pool over a Virtual that waits for
// decommits, in each placement mode: up to 1 MiB the fast slot serves it,
// above it the quick cache, which PackHoles gives up for growable blocks
// and HolesKeepPair keeps for the pair's block (pool_vpair.go).
func BenchmarkPoolVirtualPair(b *testing.B) {
	dev := testdev.Device(b)
	s, err := dev.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()
	for _, mode := range poolVirtualModes {
		for _, size := range []int{4 << 10, 1 << 20, 3 << 19, 4 << 20} {
			b.Run(fmt.Sprintf("mode=%s/size=%dKiB", mode.name, size>>10), func(b *testing.B) {
				p, closePool := newVirtualPool(b, dev, mode.opts)
				defer closePool()
				// The first pair grows the pool; the measured ones are
				// served from its lists.
				pair(b, p, s, size)
				b.ReportAllocs()
				for b.Loop() {
					pair(b, p, s, size)
				}
				b.StopTimer()
			})
		}
	}
}

// BenchmarkPoolVirtualChurn: blocks freed out of the order they were
// handed out, where HolesKeepPair files them free as PackHoles does: 64
// live blocks of 0.5-4 MiB, and per operation one of them, chosen at
// random, freed and replaced by a request of a random size. The metric
// upstream-calls/op counts the pool's commits and decommits.
func BenchmarkPoolVirtualChurn(b *testing.B) {
	dev := testdev.Device(b)
	s, err := dev.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()
	sizes := []int{1 << 19, 1 << 20, 3 << 19, 3 << 20, 4 << 20}
	for _, mode := range poolVirtualModes {
		b.Run("mode="+mode.name, func(b *testing.B) {
			p, closePool := newVirtualPool(b, dev, mode.opts)
			defer closePool()
			r := rand.New(rand.NewPCG(1, 2))
			type block struct {
				ptr  gpu.DevicePtr
				size int
			}
			live := make([]block, 64)
			for i := range live {
				n := sizes[r.IntN(len(sizes))]
				ptr, err := p.Allocate(n, s)
				if err != nil {
					b.Fatal(err)
				}
				live[i] = block{ptr, n}
			}
			st := p.Stats()
			b.ReportAllocs()
			for b.Loop() {
				i := r.IntN(len(live))
				if err := p.Deallocate(live[i].ptr, live[i].size, s); err != nil {
					b.Fatal(err)
				}
				n := sizes[r.IntN(len(sizes))]
				ptr, err := p.Allocate(n, s)
				if err != nil {
					b.Fatal(err)
				}
				live[i] = block{ptr, n}
			}
			b.StopTimer()
			// Commits and decommits: the growth path's share of the work.
			end := p.Stats()
			b.ReportMetric(float64(end.InPlaceGrowths+end.Decommits-st.InPlaceGrowths-st.Decommits)/float64(b.N), "upstream-calls/op")
			for _, l := range live {
				if err := p.Deallocate(l.ptr, l.size, s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// newVirtualPool is a Pool with opts over a Virtual that waits for
// decommits, and a function that closes both.
func newVirtualPool(b *testing.B, dev gpu.Device, opts mr.PoolOptions) (*mr.Pool, func()) {
	b.Helper()
	v, err := mr.NewVirtual(dev, mr.VirtualOptions{WaitForDecommits: true})
	if err != nil {
		b.Fatal(err)
	}
	p, err := mr.NewPool(v, opts)
	if err != nil {
		b.Fatal(err)
	}
	return p, func() {
		if err := p.Close(); err != nil {
			b.Error(err)
		}
		if err := v.Close(); err != nil {
			b.Error(err)
		}
	}
}

// pair allocates size bytes on s from p and frees them.
func pair(b *testing.B, p *mr.Pool, s gpu.Stream, size int) {
	ptr, err := p.Allocate(size, s)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Deallocate(ptr, size, s); err != nil {
		b.Fatal(err)
	}
}
