package sim_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// mallocViaHelper is a call site FailFrom can name.
func mallocViaHelper(d gpu.Device) (gpu.DevicePtr, error) { return d.Malloc(4096) }

// An injector fails the k-th call of a kind, the k-th call of any kind, or
// the calls made from a given function, and sees every call in order; a
// failed call changes nothing.
func TestInjector(t *testing.T) {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	d := dev.(*sim.Device)
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	free := func(p gpu.DevicePtr) {
		if err := d.Free(p); err != nil {
			t.Fatal(err)
		}
	}

	// The 2nd cuMemAlloc fails; the 1st and 3rd do not.
	d.SetInjector(sim.FailNth(sim.OpMalloc, 2, gpu.ErrLaunchFailed))
	var results []error
	for range 3 {
		p, err := d.Malloc(4096)
		results = append(results, err)
		if err == nil {
			free(p)
		}
	}
	if results[0] != nil || !errors.Is(results[1], gpu.ErrLaunchFailed) || results[2] != nil {
		t.Errorf("FailNth: %v", results)
	}

	// Every call is seen, in order, with its counts.
	var seen []sim.Call
	d.SetInjector(func(c sim.Call) error { seen = append(seen, c); return nil })
	p, _ := d.Malloc(256)
	d.MemsetD8Async(p, 1, 256, s)
	s.Synchronize()
	free(p)
	var ops []sim.Op
	for i, c := range seen {
		ops = append(ops, c.Op)
		if c.Seq != i+1 || c.N != 1 {
			t.Errorf("call %d: seq %d, n %d", i, c.Seq, c.N)
		}
	}
	if want := []sim.Op{sim.OpMalloc, sim.OpMemset, sim.OpStreamSynchronize, sim.OpFree}; !slices.Equal(ops, want) {
		t.Errorf("calls %v, want %v", ops, want)
	}
	if !seen[0].From("sim_test.TestInjector") || seen[0].From("mallocViaHelper") {
		t.Errorf("stack of the first call: %v", seen[0].Stack())
	}

	// The 3rd call of any kind fails.
	d.SetInjector(sim.FailCall(3, gpu.ErrLaunchFailed))
	p, err1 := d.Malloc(256)
	err2 := d.MemsetD8Async(p, 1, 256, s)
	err3 := s.Synchronize()
	if err1 != nil || err2 != nil || !errors.Is(err3, gpu.ErrLaunchFailed) {
		t.Errorf("FailCall(3): %v %v %v", err1, err2, err3)
	}
	if err := s.Synchronize(); err != nil {
		t.Errorf("the failed synchronization left a trace: %v", err)
	}
	free(p)

	// Only the calls from mallocViaHelper fail, and only the first two.
	d.SetInjector(sim.FailFrom(sim.OpMalloc, "sim_test.mallocViaHelper", 2, gpu.ErrOutOfMemory))
	var fails []bool
	for range 3 {
		p, err := mallocViaHelper(d)
		fails = append(fails, err != nil)
		if err == nil {
			free(p)
		}
		q, err := d.Malloc(4096)
		if err != nil {
			t.Fatalf("a call from elsewhere failed: %v", err)
		}
		free(q)
	}
	if !slices.Equal(fails, []bool{true, true, false}) {
		t.Errorf("FailFrom: failures %v", fails)
	}
	d.SetInjector(nil)
	if free0, total, _ := d.MemGetInfo(); free0 != total {
		t.Errorf("%d of %d bytes free after every allocation was freed", free0, total)
	}
}
