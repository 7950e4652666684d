package mr_test

import (
	"context"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// FuzzVirtual runs allocate, free (on the allocating stream or another)
// and release sequences on a Virtual resource against a reference model:
// live allocations never overlap and lie inside the range; live bytes are
// the sum of the live requests; mapped bytes are at least the live ones
// rounded to granules and, after ReleaseContext, exactly those; the
// device's memory in use equals the mapped bytes; out of memory only when
// the device has not the granules. Inputs of odd length run with
// WaitForFrees: an allocation that maps new memory leaves no free
// pending, and is out of memory only when the live granules and its own
// exceed the device.
func FuzzVirtual(f *testing.F) {
	f.Add([]byte{0, 10, 0, 200, 1, 0, 2, 0, 33, 3})
	f.Add([]byte{0, 255, 0, 1, 1, 1, 0, 17, 2, 0, 9, 1, 0, 3, 0, 40})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 200 {
			return
		}
		const capacity = 64 << 20
		d, err := sim.New(sim.Config{Capacity: capacity}).Device(0)
		if err != nil {
			t.Fatal(err)
		}
		wait := len(ops)%2 == 1
		v, err := mr.NewVirtual(d, mr.VirtualOptions{ReserveSize: 256 << 20, WaitForFrees: wait})
		if err != nil {
			t.Fatal(err)
		}
		var streams [2]gpu.Stream
		for i := range streams {
			if streams[i], err = d.NewStream(); err != nil {
				t.Fatal(err)
			}
			defer streams[i].Destroy()
		}
		g := v.Stats().Granularity
		type alloc struct {
			p    gpu.DevicePtr
			size int
		}
		var live []alloc
		var liveBytes, liveGranules uint64
		next := func() int {
			if len(ops) == 0 {
				return 0
			}
			b := ops[0]
			ops = ops[1:]
			return int(b)
		}
		for len(ops) > 0 {
			switch next() % 4 {
			case 0, 1: // allocate 1 byte to 16 MiB
				size := (next()<<16 | next()<<8 | next()) % (16 << 20)
				size++
				s := streams[next()%2]
				before := v.Stats()
				p, err := v.Allocate(size, s)
				n := (uint64(size) + g - 1) / g
				if err != nil && wait && (liveGranules+n)*g <= capacity {
					t.Fatalf("allocate %d with %d granules live, waiting for the frees: %v", size, liveGranules, err)
				}
				if st := v.Stats(); err == nil && wait && st.Pending != 0 && st.Pending != before.Pending-n*g {
					t.Fatalf("allocate %d waiting for the frees: pending %d after, %d before", size, st.Pending, before.Pending)
				}
				if err != nil {
					// Only when the granules do not fit beside what is
					// mapped (pending frees included).
					if v.Stats().Mapped+n*g <= capacity {
						t.Fatalf("allocate %d with %d of %d mapped: %v", size, v.Stats().Mapped, capacity, err)
					}
					continue
				}
				for _, a := range live {
					if p < a.p+gpu.DevicePtr(a.size) && a.p < p+gpu.DevicePtr(size) {
						t.Fatalf("allocation [%#x, +%d) overlaps [%#x, +%d)", uint64(p), size, uint64(a.p), a.size)
					}
				}
				live = append(live, alloc{p, size})
				liveBytes += uint64(size)
				liveGranules += n
			case 2: // free on either stream
				if len(live) == 0 {
					continue
				}
				i := next() % len(live)
				a := live[i]
				if err := v.Deallocate(a.p, a.size, streams[next()%2]); err != nil {
					t.Fatal(err)
				}
				live = append(live[:i], live[i+1:]...)
				liveBytes -= uint64(a.size)
				liveGranules -= (uint64(a.size) + g - 1) / g
			case 3: // release, waiting for the frees
				if err := v.ReleaseContext(context.Background()); err != nil {
					t.Fatal(err)
				}
				if st := v.Stats(); st.Mapped != liveGranules*g || st.Pending != 0 {
					t.Fatalf("after ReleaseContext: mapped %d pending %d, want %d and 0", st.Mapped, st.Pending, liveGranules*g)
				}
			}
			st := v.Stats()
			if st.Live != liveBytes || st.Mapped < liveGranules*g || st.Mapped-st.Pending != liveGranules*g {
				t.Fatalf("stats %+v, model live %d in %d granules", st, liveBytes, liveGranules)
			}
			free, total, _ := d.MemGetInfo()
			if total-free != st.Mapped {
				t.Fatalf("device memory in use %d, mapped %d", total-free, st.Mapped)
			}
		}
		for _, a := range live {
			if err := v.Deallocate(a.p, a.size, streams[0]); err != nil {
				t.Fatal(err)
			}
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		if free, total, _ := d.MemGetInfo(); free != total {
			t.Fatalf("after Close: %d bytes in use", total-free)
		}
	})
}
