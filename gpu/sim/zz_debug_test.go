package sim

import (
	"fmt"
	"io"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/trace"
	_ "github.com/streamalloc/streamalloc/trace/torchsnap"
)

func TestZZDebug(t *testing.T) {
	f, err := trace.Open("/work/wt/snaps/testdata/traces/three-stream-h100.pickle.gz", nil)
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := New(Config{}).Device(0)
	d := dev.(*Device)
	gp, _ := d.NewMemPool()
	p := gp.(*memPool)
	streams := map[uint64]gpu.Stream{}
	ids := map[gpu.Stream]int{}
	live := map[uint64]gpu.DevicePtr{}
	var base gpu.DevicePtr
	for i := 0; ; i++ {
		ev, err := f.Next()
		if err == io.EOF {
			break
		}
		s, ok := streams[ev.Stream]
		if !ok {
			s, _ = d.NewStream()
			streams[ev.Stream] = s
			ids[s] = len(ids) + 1
		}
		if i == 77 {
			d.mu.Lock()
			for x := p.free; x != nil; x = x.fnext {
				var ds []string
				for _, o := range x.deps {
					ds = append(ds, fmt.Sprint(ids[o.s]))
				}
				fmt.Printf("free %.1fK size %d pending %v deps %v freed %d\n", float64(x.addr-uint64(base))/1024, x.size, x.pending, ds, x.freed)
			}
			d.mu.Unlock()
			return
		}
		switch ev.Op {
		case trace.Alloc:
			ptr, err := d.MallocFromPoolAsync(int(ev.Size), gp, s)
			if err != nil {
				t.Fatal(err)
			}
			if base == 0 {
				base = ptr
			}
			live[ev.Ptr] = ptr
		case trace.Free:
			if ptr, ok := live[ev.Ptr]; ok {
				d.FreeAsync(ptr, s)
				delete(live, ev.Ptr)
			}
		}
	}
}
