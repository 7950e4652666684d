package mr_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// fuzzResources are the suballocators whose bookkeeping is our own.
var fuzzResources = []struct {
	name string
	make func(dev gpu.Device) (mr.Resource, error)
}{
	{"fixedsize", func(dev gpu.Device) (mr.Resource, error) {
		return mr.NewFixedSize(mr.NewDirect(dev), mr.FixedSizeOptions{BlockSize: 16 << 10, BlocksPerChunk: 4})
	}},
	{"binning", func(dev gpu.Device) (mr.Resource, error) {
		return mr.NewBinning(mr.NewDirect(dev), mr.BinningOptions{MinSize: 256, MaxSize: 4096, BlocksPerChunk: 4})
	}},
	{"arena", func(dev gpu.Device) (mr.Resource, error) {
		return mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{SuperblockSize: 64 << 10, LargeSize: 16 << 10})
	}},
}

type fuzzAlloc struct {
	p gpu.DevicePtr
	n int
}

// FuzzResourceOps runs operation sequences decoded from the input against
// each suballocator and a reference model (the set of live allocations):
// allocations are aligned and never overlap a live one, good frees succeed,
// bad frees fail with their sentinel and change nothing, Used is always
// the live bytes, and after everything is freed and released nothing is
// held.
func FuzzResourceOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 40, 1, 8, 0, 0, 9, 0, 1, 10, 0, 1, 11, 0, 2, 12, 0, 0})
	f.Add([]byte{0, 255, 255, 0, 0, 128, 1, 1, 1, 2, 4, 0, 0, 5, 1, 0, 6, 0, 0, 7, 0, 0, 4, 0, 2, 4, 0, 1})
	f.Add([]byte{0, 30, 0, 0, 30, 1, 0, 30, 2, 4, 0, 1, 4, 0, 2, 7, 0, 0, 0, 30, 0, 5, 0, 0, 4, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 600 {
			ops = ops[:600]
		}
		for _, fr := range fuzzResources {
			dev := resDevice(t, sim.Config{Capacity: 4 << 20})
			r, err := fr.make(dev)
			if err != nil {
				t.Fatal(err)
			}
			streams := []gpu.Stream{resStream(t, dev), resStream(t, dev), resStream(t, dev)}
			fuzzRun(t, fr.name, dev, r, streams, ops)
		}
	})
}

func fuzzRun(t *testing.T, name string, dev gpu.Device, r mr.Resource, streams []gpu.Stream, ops []byte) {
	var live []fuzzAlloc
	var freed []fuzzAlloc // freed and not live again
	var used uint64
	u := r.(mr.UsageReporter)
	overlaps := func(p gpu.DevicePtr, n int) bool {
		for _, a := range live {
			if p < a.p+gpu.DevicePtr(a.n) && a.p < p+gpu.DevicePtr(n) {
				return true
			}
		}
		return false
	}
	isLive := func(p gpu.DevicePtr) bool {
		for _, a := range live {
			if p >= a.p && p < a.p+gpu.DevicePtr(max(a.n, 1)) {
				return true
			}
		}
		return false
	}
	expectUnchanged := func(op string, err error, want ...error) {
		t.Helper()
		ok := false
		for _, w := range want {
			ok = ok || errors.Is(err, w)
		}
		if !ok {
			t.Fatalf("%s: %s: err = %v, want one of %v", name, op, err, want)
		}
		if got := u.Usage().Used; got != used {
			t.Fatalf("%s: %s changed Used: %d, want %d", name, op, got, used)
		}
	}
	for i := 0; i+2 < len(ops); i += 3 {
		op, a, b := ops[i]%8, int(ops[i+1]), int(ops[i+2])
		s := streams[b%len(streams)]
		switch op {
		case 0, 1, 2, 3: // allocate (a, b) -> size
			n := (a<<8 | b) % (20 << 10)
			p, err := r.Allocate(n, s)
			if errors.Is(err, mr.ErrOutOfMemory) {
				continue
			}
			if err != nil {
				t.Fatalf("%s: allocate %d: %v", name, n, err)
			}
			if n == 0 {
				if p != 0 {
					t.Fatalf("%s: allocate 0 = %#x", name, p)
				}
				continue
			}
			if p == 0 || p%mr.Alignment != 0 || overlaps(p, n) {
				t.Fatalf("%s: allocate %d = %#x: null, misaligned or overlapping a live allocation", name, n, p)
			}
			live = append(live, fuzzAlloc{p, n})
			used += uint64(n)
			for j := 0; j < len(freed); j++ {
				if freed[j].p >= p && freed[j].p < p+gpu.DevicePtr(n) {
					freed = append(freed[:j], freed[j+1:]...)
					j--
				}
			}
		case 4: // free live allocation a on stream b
			if len(live) == 0 {
				continue
			}
			k := a % len(live)
			x := live[k]
			if err := r.Deallocate(x.p, x.n, s); err != nil {
				t.Fatalf("%s: free %#x (%d): %v", name, x.p, x.n, err)
			}
			live = append(live[:k], live[k+1:]...)
			used -= uint64(x.n)
			freed = append(freed, x)
		case 5: // double free
			if len(freed) == 0 {
				continue
			}
			x := freed[a%len(freed)]
			if isLive(x.p) {
				continue
			}
			err := r.Deallocate(x.p, x.n, s)
			expectUnchanged("double free", err, mr.ErrDoubleFree, mr.ErrUnknownPointer)
		case 6: // free with another size
			if len(live) == 0 {
				continue
			}
			x := live[a%len(live)]
			n := x.n + 1 + b
			err := r.Deallocate(x.p, n, s)
			expectUnchanged("free with wrong size", err, mr.ErrSizeMismatch)
			if q := x.p + gpu.DevicePtr(mr.Alignment*(1+a%4)); x.n > mr.Alignment*4 && !isLiveStart(live, q) {
				err = r.Deallocate(q, x.n, s)
				// The arena remembers freed starts until reused as a
				// start, so an interior pointer can read as a double free.
				expectUnchanged("free interior pointer", err, mr.ErrUnknownPointer, mr.ErrDoubleFree)
			}
		case 7: // release
			if rel, ok := r.(mr.Releaser); ok {
				if err := rel.Release(); err != nil {
					t.Fatalf("%s: release: %v", name, err)
				}
			}
		}
		if got := u.Usage().Used; got != used {
			t.Fatalf("%s: Used = %d, model says %d", name, got, used)
		}
	}
	for _, x := range live {
		if err := r.Deallocate(x.p, x.n, streams[0]); err != nil {
			t.Fatalf("%s: final free: %v", name, err)
		}
	}
	resReleaseAll(t, dev, r, streams...)
}

func isLiveStart(live []fuzzAlloc, p gpu.DevicePtr) bool {
	for _, a := range live {
		if a.p == p {
			return true
		}
	}
	return false
}
