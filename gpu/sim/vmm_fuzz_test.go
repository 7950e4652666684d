package sim_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// vmRef is the reference model of virtual memory: granules of
// reservations, what is mapped on each, and the physical allocations.
type vmRef struct {
	resv []*refResv
	phys []*refPhys
	maps int
}

type refResv struct {
	p     gpu.DevicePtr
	n     int // granules
	gran  []refGranule
	freed bool
}

type refGranule struct {
	ph     *refPhys // nil: unmapped
	id     int      // the Map call
	access bool
}

type refPhys struct {
	h        gpu.Physical
	n        int // granules
	mapped   int
	released bool
}

// find returns the live reservation holding p, and the granule of p in
// it; reservations may be adjacent, so a range past one's end may start
// in the next.
func (r *vmRef) find(p gpu.DevicePtr, g uint64) (*refResv, int) {
	for _, x := range r.resv {
		if x.p <= p && uint64(p) < uint64(x.p)+uint64(x.n)*g {
			return x, int(uint64(p-x.p) / g)
		}
	}
	return nil, 0
}

func (r *vmRef) charged(g uint64) uint64 {
	var b uint64
	for _, ph := range r.phys {
		if !ph.released || ph.mapped > 0 {
			b += uint64(ph.n) * g
		}
	}
	return b
}

// FuzzVirtualMemory runs sequences of reserve, create, map, unmap, set
// access, release and free against the simulator and a reference model:
// every call succeeds exactly when the model says it may, with the error
// the driver gives otherwise; the device's free memory is the capacity
// less the live physical allocations; and a one-byte set succeeds on
// exactly the granules the model has mapped and accessible.
func FuzzVirtualMemory(f *testing.F) {
	f.Add([]byte{0, 3, 1, 2, 2, 0, 0, 0, 2, 0, 0, 4, 0, 0, 2, 3, 0, 0, 1, 5, 0, 6, 0})
	f.Add([]byte{0, 7, 1, 7, 2, 0, 1, 3, 0, 1, 2, 0, 0, 3, 0, 1, 0, 3, 0, 0, 4, 5, 0, 2, 0, 0, 2, 0, 2})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 300 {
			return
		}
		d, err := sim.New(sim.Config{Capacity: 32 << 20}).Device(0)
		if err != nil {
			t.Fatal(err)
		}
		dev := d.(*sim.Device)
		g, _ := dev.Granularity(false)
		s, err := dev.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Destroy()
		var ref vmRef
		next := func() int {
			if len(ops) == 0 {
				return 0
			}
			b := ops[0]
			ops = ops[1:]
			return int(b)
		}
		pickResv := func() *refResv {
			if len(ref.resv) == 0 {
				return nil
			}
			return ref.resv[next()%len(ref.resv)]
		}
		pickPhys := func() *refPhys {
			if len(ref.phys) == 0 {
				return &refPhys{} // handle 0: never a live allocation
			}
			return ref.phys[next()%len(ref.phys)]
		}
		check := func(what string, err error, ok bool, code gpu.Code) {
			t.Helper()
			if ok && err != nil {
				t.Fatalf("%s: %v, want success", what, err)
			}
			if !ok && !errors.Is(err, code) {
				t.Fatalf("%s: got %v, want %v", what, err, code)
			}
		}
		for len(ops) > 0 {
			switch next() % 7 {
			case 0: // reserve 1-8 granules
				n := next()%8 + 1
				p, err := dev.ReserveAddress(uint64(n)*g, 0)
				check("reserve", err, true, 0)
				ref.resv = append(ref.resv, &refResv{p: p, n: n, gran: make([]refGranule, n)})
			case 1: // create 1-4 granules
				n := next()%4 + 1
				h, err := dev.CreatePhysical(uint64(n) * g)
				fits := ref.charged(g)+uint64(n)*g <= 32<<20
				check("create", err, fits, gpu.ErrOutOfMemory)
				if fits {
					ref.phys = append(ref.phys, &refPhys{h: h, n: n})
				}
			case 2: // map
				r, ph := pickResv(), pickPhys()
				if r == nil {
					continue
				}
				a, c, o := next()%(r.n+1), next()%4+1, next()%4
				p := r.p + gpu.DevicePtr(uint64(a)*g)
				r, a = ref.find(p, g)
				ok := r != nil && ph.h != 0 && !ph.released && a+c <= r.n && o+c <= ph.n
				for i := a; ok && i < a+c; i++ {
					ok = r.gran[i].ph == nil
				}
				// The range is checked first, then the handle.
				code := gpu.ErrNotSupported
				if r != nil && a+c <= r.n && (ph.h == 0 || ph.released) {
					code = gpu.ErrInvalidValue
				}
				err := dev.Map(p, uint64(c)*g, ph.h, uint64(o)*g)
				check("map", err, ok, code)
				if ok {
					ref.maps++
					for i := a; i < a+c; i++ {
						r.gran[i] = refGranule{ph: ph, id: ref.maps}
					}
					ph.mapped += c
				}
			case 3, 4: // unmap or set access
				r := pickResv()
				if r == nil {
					continue
				}
				unmap := ops != nil && len(ops)%2 == 0
				a, c := next()%(r.n+1), next()%4+1
				p, n := r.p+gpu.DevicePtr(uint64(a)*g), uint64(c)*g
				r, a = ref.find(p, g)
				ok := r != nil && a+c <= r.n
				for i := a; ok && i < a+c; i++ {
					ok = r.gran[i].ph != nil
				}
				if unmap && ok {
					ok = (a == 0 || r.gran[a-1].ph == nil || r.gran[a-1].id != r.gran[a].id) &&
						(a+c == r.n || r.gran[a+c].ph == nil || r.gran[a+c].id != r.gran[a+c-1].id)
				}
				if unmap {
					check("unmap", dev.Unmap(p, n), ok, gpu.ErrInvalidValue)
				} else {
					check("set access", dev.SetAccess(p, n), ok, gpu.ErrInvalidValue)
				}
				for i := a; ok && i < a+c; i++ {
					if unmap {
						r.gran[i].ph.mapped--
						r.gran[i] = refGranule{}
					} else {
						r.gran[i].access = true
					}
				}
			case 5: // release
				ph := pickPhys()
				ok := ph.h != 0 && !ph.released
				check("release", dev.ReleasePhysical(ph.h), ok, gpu.ErrInvalidValue)
				if ok {
					ph.released = true
				}
			case 6: // free a reservation
				r := pickResv()
				if r == nil {
					continue
				}
				ok := !r.freed
				for i := 0; ok && i < r.n; i++ {
					ok = r.gran[i].ph == nil
				}
				check("free address", dev.FreeAddress(r.p, uint64(r.n)*g), ok, gpu.ErrInvalidValue)
				if ok {
					// Its addresses may be reserved again: the model
					// forgets it rather than tell the two apart.
					r.freed = true
					ref.resv = slices.DeleteFunc(ref.resv, func(x *refResv) bool { return x == r })
				}
			}
			free, total, err := dev.MemGetInfo()
			if err != nil {
				t.Fatal(err)
			}
			if want := ref.charged(g); total-free != want {
				t.Fatalf("device memory in use %d, model %d", total-free, want)
			}
		}
		for _, r := range ref.resv {
			for i := 0; i < r.n && !r.freed; i++ {
				want := r.gran[i].ph != nil && r.gran[i].access
				err := dev.MemsetD8Async(r.p+gpu.DevicePtr(uint64(i)*g+g-1), 1, 1, s)
				if (err == nil) != want {
					t.Fatalf("set on granule %d of %#x: %v, model says accessible=%v", i, uint64(r.p), err, want)
				}
			}
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
	})
}
