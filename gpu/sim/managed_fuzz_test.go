package sim_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// refPage is the reference model of one managed page: the rules of
// managed.go's file comment, written out field by field.
type refPage struct {
	host, dev, mapped                    bool
	readMostly, prefHost, prefDev, accBy bool
}

type refManaged struct {
	pages []refPage
	st    sim.ManagedStats
}

func (r *refManaged) kernel(a, b int) {
	for i := a; i < b; i++ {
		p := &r.pages[i]
		populated := p.host || p.dev
		if p.dev || (populated && (p.mapped || p.accBy)) {
			continue
		}
		r.st.DeviceFaults++
		switch {
		case populated && p.readMostly:
			r.st.Duplicated++
			p.dev = true
		case populated && p.prefHost:
			p.mapped = true
		default:
			p.host, p.mapped, p.dev = false, false, true
		}
	}
}

func (r *refManaged) hostAccess(a, b int, write bool) {
	for i := a; i < b; i++ {
		p := &r.pages[i]
		if !p.host {
			r.st.HostFaults++
			if !write && p.readMostly && p.dev {
				r.st.Duplicated++
				p.host = true
			} else {
				p.dev, p.mapped, p.host = false, false, true
			}
		}
		if write {
			p.dev = false
		}
	}
}

func (r *refManaged) prefetch(a, b int, toHost bool) {
	for i := a; i < b; i++ {
		p := &r.pages[i]
		here, there := &p.dev, &p.host
		moved := &r.st.PrefetchedToDevice
		if toHost {
			here, there, moved = &p.host, &p.dev, &r.st.PrefetchedToHost
		}
		if *here {
			continue
		}
		*moved++
		if p.readMostly && *there {
			r.st.Duplicated++
			*here = true
			continue
		}
		*there, p.mapped, *here = false, false, true
	}
}

func (r *refManaged) advise(a, b int, adv gpu.Advice, onHost bool) {
	for i := a; i < b; i++ {
		p := &r.pages[i]
		switch adv {
		case gpu.AdviseSetReadMostly:
			p.readMostly = true
		case gpu.AdviseUnsetReadMostly:
			if p.host && p.dev {
				p.host = false
			}
			p.readMostly = false
		case gpu.AdviseSetPreferredLocation:
			p.prefHost, p.prefDev = onHost, !onHost
		case gpu.AdviseUnsetPreferredLocation:
			p.prefHost, p.prefDev = false, false
		case gpu.AdviseSetAccessedBy:
			if !onHost {
				p.accBy = true
			}
		case gpu.AdviseUnsetAccessedBy:
			if !onHost {
				p.accBy = false
			}
		}
	}
}

// FuzzManagedResidency drives kernels, host accesses, prefetches and
// advice over an 8-page managed allocation from the fuzzer's bytes, three
// bytes an operation (kind, first page, page count), and checks the
// device's counters against the reference model after each one.
func FuzzManagedResidency(f *testing.F) {
	f.Add([]byte{0, 0, 8, 1, 0, 8, 0, 0, 8})
	f.Add([]byte{5, 0, 8, 2, 0, 8, 3, 0, 8, 0, 2, 3, 2, 0, 8, 6, 0, 8})
	f.Add([]byte{9, 0, 8, 2, 0, 4, 0, 0, 8, 11, 0, 8, 0, 0, 8, 12, 0, 8, 0, 3, 5})
	f.Add([]byte{7, 0, 8, 1, 1, 2, 0, 0, 8, 1, 0, 8, 8, 0, 8, 0, 0, 8})
	f.Fuzz(func(t *testing.T, prog []byte) {
		const pages = 8
		if len(prog) > 3*64 {
			prog = prog[:3*64]
		}
		gd, err := sim.New(sim.Config{}).Device(0)
		if err != nil {
			t.Fatal(err)
		}
		dev := gd.(*sim.Device)
		s, err := dev.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Destroy()
		k, err := kernels.Load(dev)
		if err != nil {
			t.Fatal(err)
		}
		p, err := dev.MallocManaged(pages * sim.ManagedPage)
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Free(p)
		ref := refManaged{pages: make([]refPage, pages)}
		at := func(i int) gpu.DevicePtr { return p + gpu.DevicePtr(i*sim.ManagedPage) }
		here, host := gpu.DeviceLocation(0), gpu.HostLocation()
		for len(prog) >= 3 {
			kind, a := prog[0]%13, int(prog[1]%pages)
			b := min(pages, a+1+int(prog[2]%pages))
			prog = prog[3:]
			n := (b - a) * sim.ManagedPage
			var err error
			switch kind {
			case 0:
				err = k.Fill(s, at(a), n/4, 1)
				ref.kernel(a, b)
			case 1, 2:
				err = dev.HostAccess(at(a), n, kind == 1)
				ref.hostAccess(a, b, kind == 1)
			case 3, 4:
				loc := here
				if kind == 4 {
					loc = host
				}
				err = dev.PrefetchAsync(at(a), n, loc, s)
				ref.prefetch(a, b, kind == 4)
			default: // 5-10: each advice about the device; 11, 12: preferred location, accessed-by the host
				adv, onHost, loc := gpu.Advice(kind-4), false, here
				switch kind {
				case 11:
					adv, onHost, loc = gpu.AdviseSetPreferredLocation, true, host
				case 12:
					adv, onHost, loc = gpu.AdviseSetAccessedBy, true, host
				}
				err = dev.Advise(at(a), n, adv, loc)
				ref.advise(a, b, adv, onHost)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if got := dev.ManagedStats(); got != ref.st {
				t.Fatalf("after op %d on pages [%d, %d):\n got %v\nwant %v", kind, a, b, got, ref.st)
			}
		}
	})
}
