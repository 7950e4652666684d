package mr_test

import (
	"context"
	"errors"
	"testing"
	"unsafe"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// FuzzHostPoolOps runs sequences of HostPool operations on two streams,
// one of them held at times, against a model: the live slices with their
// lengths, the blocks the pool holds with their classes. After every
// operation Usage must equal the model's sums, live slices must not
// overlap, and every bad free must be refused with its sentinel, changing
// nothing.
func FuzzHostPoolOps(f *testing.F) {
	f.Add([]byte{0, 10, 1, 0, 2, 0, 3, 0, 4})
	f.Add([]byte{0, 200, 0, 30, 5, 1, 1, 0, 6, 7, 0, 90, 1, 1, 8})
	f.Add([]byte{5, 0, 9, 0, 250, 1, 0, 6, 0, 9, 2, 1, 1, 8, 3, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		dev, err := sim.New(sim.Config{}).Device(0)
		if err != nil {
			t.Fatal(err)
		}
		sd := dev.(*sim.Device)
		streams := [2]gpu.Stream{}
		for i := range streams {
			if streams[i], err = dev.NewStream(); err != nil {
				t.Fatal(err)
			}
		}
		release := func() {}
		defer func() { release() }()
		p := mr.NewHostPool(dev)
		var live [][]byte
		var freed [][]byte          // freed since the last Release
		blocks := map[uintptr]int{} // held blocks: start -> class
		used := 0
		check := func(step int) {
			t.Helper()
			reserved := 0
			for _, c := range blocks {
				reserved += c
			}
			if u := p.Usage(); u.Used != uint64(used) || u.Reserved != uint64(reserved) {
				t.Fatalf("step %d: usage %+v, model used %d reserved %d", step, u, used, reserved)
			}
		}
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%10, int(ops[i+1])
			s := streams[arg%2]
			switch op {
			case 0, 1: // allocate (1: ordered), up to ~3 MiB
				n := 1 + arg*arg*50
				var b []byte
				if op == 0 {
					b, err = mr.AllocateHost[byte](p, n, s)
				} else {
					b, err = allocOrdered(p, n, s)
				}
				if err != nil {
					t.Fatalf("step %d: allocate %d: %v", i, n, err)
				}
				a := uintptr(unsafe.Pointer(&b[0]))
				for _, o := range live {
					oa := uintptr(unsafe.Pointer(&o[0]))
					if a < oa+uintptr(len(o)) && oa < a+uintptr(n) {
						t.Fatalf("step %d: new slice overlaps a live one", i)
					}
				}
				if _, ok := blocks[a]; !ok {
					blocks[a] = hostClassModel(n)
				}
				live = append(live, b)
				used += n
			case 2, 3: // free the arg'th live slice (3: after a copy from it on the other stream)
				if len(live) == 0 {
					continue
				}
				k := arg % len(live)
				b := live[k]
				if op == 3 {
					other := streams[(arg+1)%2]
					d, err := dev.Malloc(len(b))
					if err != nil {
						t.Fatal(err)
					}
					if err := dev.CopyHtoDAsync(d, b, other); err != nil {
						t.Fatal(err)
					}
					if err := p.RecordStream(b, other); err != nil {
						t.Fatalf("step %d: record stream: %v", i, err)
					}
					if err := dev.FreeAsync(d, other); err != nil {
						t.Fatal(err)
					}
				}
				if err := mr.FreeHost(p, b, s); err != nil {
					t.Fatalf("step %d: free: %v", i, err)
				}
				live = append(live[:k], live[k+1:]...)
				freed = append(freed, b)
				used -= len(b)
			case 4: // bad frees: a sub-slice of a live slice, a slice freed before
				if len(live) > 0 {
					b := live[arg%len(live)]
					if len(b) > 1 {
						if err := mr.FreeHost(p, b[1:], s); !errors.Is(err, mr.ErrSubSlice) {
							t.Fatalf("step %d: free of a sub-slice: %v", i, err)
						}
					}
				}
				if len(freed) > 0 {
					b := freed[arg%len(freed)]
					if !isLive(live, b) {
						if err := mr.FreeHost(p, b, s); !errors.Is(err, mr.ErrDoubleFree) {
							t.Fatalf("step %d: double free: %v", i, err)
						}
					}
				}
			case 5: // hold the stream (until op 6)
				release()
				release = sd.Hold(s)
			case 6:
				release()
				release = func() {}
			case 7: // release the cache
				release()
				release = func() {}
				if _, err := p.ReleaseContext(context.Background()); err != nil {
					t.Fatalf("step %d: release: %v", i, err)
				}
				for a := range blocks {
					if !liveAt(live, a) {
						delete(blocks, a)
					}
				}
				freed = nil
			case 8: // synchronize (after ending a hold, which would block it forever)
				release()
				release = func() {}
				if err := s.Synchronize(); err != nil {
					t.Fatal(err)
				}
			case 9:
				if err := mr.FreeHost(p, make([]byte, 1+arg), s); !errors.Is(err, mr.ErrUnknownPointer) {
					t.Fatalf("step %d: free of pageable memory: %v", i, err)
				}
			}
			check(i)
		}
		release()
		release = func() {}
		for _, b := range live {
			if err := mr.FreeHost(p, b, streams[0]); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := p.ReleaseContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		if u := p.Usage(); u.Used != 0 || u.Reserved != 0 {
			t.Fatalf("after freeing and releasing everything: %+v", u)
		}
	})
}

// hostClassModel is the size class the file comment of hostpool.go states.
func hostClassModel(n int) int {
	switch {
	case n <= mr.MinHostBlock:
		return mr.MinHostBlock
	case n <= mr.MaxHostPow2:
		c := mr.MinHostBlock
		for c < n {
			c *= 2
		}
		return c
	}
	return (n + mr.MaxHostPow2 - 1) / mr.MaxHostPow2 * mr.MaxHostPow2
}

func isLive(live [][]byte, b []byte) bool {
	return liveAt(live, uintptr(unsafe.Pointer(&b[0])))
}

func liveAt(live [][]byte, a uintptr) bool {
	for _, o := range live {
		if uintptr(unsafe.Pointer(&o[0])) == a {
			return true
		}
	}
	return false
}
