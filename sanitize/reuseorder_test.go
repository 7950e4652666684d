package sanitize_test

import (
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// reuseOrder sits between the sanitizer's device and the simulator's, and
// checks every driver allocation that reuses memory
// freed on another stream against the simulator's own happens-before
// relation: the free must be ordered before the allocation, by whatever
// rule the driver's pool reused the memory (the host knew the free
// complete, an event wait, an opportunistic reuse of a completed free, an
// inserted dependency). It counts the cross-stream reuses it checked and
// those the simulator finds unordered.
type reuseOrder struct {
	gpu.Device
	sd *sim.Device

	mu                 sync.Mutex
	sizes              map[gpu.DevicePtr]int // live driver allocations
	frees              []freed               // frees not yet reused
	checked, unordered int
}

type freed struct {
	p  gpu.DevicePtr
	n  int
	op sim.OpID
}

func newReuseOrder(dev gpu.Device, sd *sim.Device) *reuseOrder {
	return &reuseOrder{Device: dev, sd: sd, sizes: make(map[gpu.DevicePtr]int)}
}

func (r *reuseOrder) MallocAsync(n int, s gpu.Stream) (gpu.DevicePtr, error) {
	p, err := r.Device.MallocAsync(n, s)
	if err == nil {
		r.allocated(p, n, s)
	}
	return p, err
}

func (r *reuseOrder) MallocFromPoolAsync(n int, pool gpu.MemPool, s gpu.Stream) (gpu.DevicePtr, error) {
	p, err := r.Device.MallocFromPoolAsync(n, pool, s)
	if err == nil {
		r.allocated(p, n, s)
	}
	return p, err
}

func (r *reuseOrder) FreeAsync(p gpu.DevicePtr, s gpu.Stream) error {
	if err := r.Device.FreeAsync(p, s); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.frees = append(r.frees, freed{p, r.sizes[p], r.sd.LastOp(s)})
	delete(r.sizes, p)
	return nil
}

// allocated checks the allocation [p, p+n) on s against every earlier
// free it overlaps, and forgets those frees.
func (r *reuseOrder) allocated(p gpu.DevicePtr, n int, s gpu.Stream) {
	op := r.sd.LastOp(s)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sizes[p] = n
	kept := r.frees[:0]
	for _, f := range r.frees {
		if f.p >= p+gpu.DevicePtr(n) || p >= f.p+gpu.DevicePtr(f.n) {
			kept = append(kept, f)
			continue
		}
		if f.op.Stream() == op.Stream() {
			continue // stream order
		}
		r.checked++
		if !r.sd.HappensBefore(f.op, op) {
			r.unordered++
		}
	}
	r.frees = kept
}

// reuseOrder's check can fail: memory "freed" on one stream and taken on
// another with nothing ordering them is counted unordered; once the second
// stream waits on an event recorded after the free, it is not.
func TestReuseOrderFindsUnordered(t *testing.T) {
	raw, err := sim.New(sim.Config{}).Device(0)
	must(t, err)
	sd := raw.(*sim.Device)
	sa, err := raw.NewStream()
	must(t, err)
	sb, err := raw.NewStream()
	must(t, err)
	e, err := raw.NewEvent(false)
	must(t, err)
	const n = 4096
	p, err := raw.Malloc(n)
	must(t, err)
	r := newReuseOrder(raw, sd)
	hold := sd.Hold(sa) // the "free" on A stays pending
	must(t, raw.MemsetD8Async(p, 0, n, sa))
	r.frees = append(r.frees, freed{p, n, sd.LastOp(sa)})
	must(t, e.Record(sb))
	r.allocated(p, n, sb)
	if r.checked != 1 || r.unordered != 1 {
		t.Errorf("an unordered reuse: %d checked, %d unordered; want 1, 1", r.checked, r.unordered)
	}
	r.frees = append(r.frees, freed{p, n, sd.LastOp(sa)})
	must(t, e.Record(sa))
	must(t, sb.WaitEvent(e))
	r.allocated(p, n, sb)
	if r.checked != 2 || r.unordered != 1 {
		t.Errorf("an ordered reuse: %d checked, %d unordered; want 2, 1", r.checked, r.unordered)
	}
	hold()
	must(t, raw.Synchronize())
	must(t, raw.Free(p))
}
