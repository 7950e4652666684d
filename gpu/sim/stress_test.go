package sim_test

import (
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// TestConcurrentStress drives one device from many goroutines, each with
// its own stream, handing buffers to a neighbour through events. Data is
// checked by kernels, the race detector (under -race) checks that neither
// the simulator's bookkeeping nor correctly ordered device work races, and
// the pool must account for everything at the end.
func TestConcurrentStress(t *testing.T) {
	const workers = 6
	rounds := 100
	if testing.Short() {
		rounds = 20
	}
	f := newFixture(t, sim.Config{Capacity: 256 << 20})
	pool := f.defaultPool()
	f.must(pool.SetAttribute(gpu.PoolReleaseThreshold, 32<<20))
	counter, err := f.dev.Malloc(4 * workers)
	f.must(err)
	f.must(f.dev.MemsetD8Async(counter, 0, 4*workers, f.s))
	f.must(f.s.Synchronize())

	type handoff struct {
		p    gpu.DevicePtr
		n    int
		seed uint32
		e    gpu.Event
	}
	chans := make([]chan handoff, workers)
	for i := range chans {
		chans[i] = make(chan handoff, rounds)
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			s, err := f.dev.NewStream()
			if err != nil {
				t.Error(err)
				return
			}
			errs := counter + gpu.DevicePtr(4*w)
			next := chans[(w+1)%workers]
			for r := range rounds {
				n := 4096 * (1 + (w+r)%13)
				p, err := f.dev.MallocAsync(4*n, s)
				if err != nil {
					t.Error(err)
					return
				}
				seed := uint32(w*1000 + r)
				if err := f.k.Fill(s, p, n, seed); err != nil {
					t.Error(err)
					return
				}
				e, _ := f.dev.NewEvent(false)
				if err := e.Record(s); err != nil {
					t.Error(err)
					return
				}
				next <- handoff{p, n, seed, e}
				// Take the neighbour's buffer: wait, check, free here.
				h := <-chans[w]
				if err := s.WaitEvent(h.e); err != nil {
					t.Error(err)
					return
				}
				_ = h.e.Destroy()
				if err := f.k.Check(s, h.p, h.n, h.seed, errs); err != nil {
					t.Error(err)
					return
				}
				if err := f.dev.FreeAsync(h.p, s); err != nil {
					t.Error(err)
					return
				}
				if r%10 == 9 {
					if err := s.Synchronize(); err != nil {
						t.Error(err)
						return
					}
				}
			}
			if err := s.Synchronize(); err != nil {
				t.Error(err)
			}
			_ = s.Destroy()
		})
	}
	wg.Wait()
	f.must(f.dev.Synchronize())
	got := make([]byte, 4*workers)
	f.must(f.dev.CopyDtoHAsync(got, counter, f.s))
	f.must(f.s.Synchronize())
	for i, b := range got {
		if b != 0 {
			t.Fatalf("mismatch counter byte %d = %d", i, b)
		}
	}
	if used := f.attr(pool, gpu.PoolUsedMemCurrent); used != 0 {
		t.Errorf("used %d at the end, want 0", used)
	}
	if r := f.attr(pool, gpu.PoolReservedMemCurrent); r > 32<<20 {
		t.Errorf("reserved %d after synchronize, above the 32 MiB threshold", r)
	}
}
