package mr_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

func TestCurrentDefault(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	def := mr.Current(dev)
	if _, ok := def.(*mr.Async); !ok {
		t.Fatalf("default of a device with pools is %T, want *mr.Async", def)
	}
	if mr.Current(dev) != def {
		t.Error("Current returned another default the second time")
	}
	if d := mr.Current(noPools{dev}); d == nil {
		t.Error("no default for a device without pools")
	} else if _, ok := d.(*mr.Direct); !ok {
		t.Errorf("default of a device without pools is %T, want *mr.Direct", d)
	}
	if mr.Current(nil) != nil || mr.SetCurrent(nil, def) != nil {
		t.Error("nil device has a current resource")
	}
}

func TestSetCurrent(t *testing.T) {
	b := sim.New(sim.Config{Devices: 2})
	dev0, _ := b.Device(0)
	dev1, _ := b.Device(1)
	def0, def1 := mr.Current(dev0), mr.Current(dev1)
	if def0 == def1 {
		t.Fatal("two devices share a default resource")
	}
	r := mr.NewDirect(dev0)
	if prev := mr.SetCurrent(dev0, r); prev != def0 {
		t.Errorf("first SetCurrent returned %v, want the default", prev)
	}
	if mr.Current(dev0) != r || mr.Current(dev1) != def1 {
		t.Error("SetCurrent on device 0 not seen, or seen on device 1")
	}
	r2 := mr.NewManaged(dev0)
	if prev := mr.SetCurrent(dev0, r2); prev != r {
		t.Errorf("SetCurrent returned %v, want the resource set before", prev)
	}
	if prev := mr.SetCurrent(dev0, nil); prev != r2 {
		t.Errorf("reset returned %v, want the resource set before", prev)
	}
	if mr.Current(dev0) != def0 {
		t.Error("reset did not restore the same default")
	}
}

// TestCurrentConcurrent races Current and SetCurrent: every Current sees
// one of the installed resources, and the chain of previous values links
// every installation exactly once.
func TestCurrentConcurrent(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	def := mr.Current(dev)
	const n = 16
	rs := make([]mr.Resource, n)
	for i := range rs {
		rs[i] = mr.NewDirect(dev)
	}
	valid := map[mr.Resource]bool{def: true}
	for _, r := range rs {
		valid[r] = true
	}
	prevs := make([]mr.Resource, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			prevs[i] = mr.SetCurrent(dev, rs[i])
		}()
		go func() {
			defer wg.Done()
			if c := mr.Current(dev); !valid[c] {
				t.Errorf("Current returned %v, never installed", c)
			}
		}()
	}
	wg.Wait()
	// Each resource was replaced at most once, the default exactly once.
	seen := map[mr.Resource]int{}
	for _, p := range prevs {
		seen[p]++
	}
	if seen[def] != 1 {
		t.Errorf("the default was replaced %d times", seen[def])
	}
	last := mr.Current(dev)
	for _, r := range rs {
		want := 1
		if r == last {
			want = 0
		}
		if seen[r] != want {
			t.Errorf("resource replaced %d times, want %d", seen[r], want)
		}
	}
	mr.SetCurrent(dev, nil)
}

func ExampleCurrent() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	fmt.Printf("%T\n", mr.Current(dev)) // the driver's pool: the sim has pools

	r := mr.NewDirect(dev)
	prev := mr.SetCurrent(dev, r)
	fmt.Printf("%T %v\n", prev, mr.Current(dev) == r)
	mr.SetCurrent(dev, prev)
	// Output:
	// *mr.Async
	// *mr.Async true
}
