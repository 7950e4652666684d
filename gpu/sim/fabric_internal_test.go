package sim

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// TestNoIMEXChannelMakesNoPool: the refusal of a pool exportable as fabric
// on a device without an IMEX channel registers no pool (the device's
// list, which Destroy and the reaper walk, and the table that resolves
// raw handles stay as they were), so nothing is left to destroy; a POSIX
// pool beside it is made and registered.
func TestNoIMEXChannelMakesNoPool(t *testing.T) {
	gd, err := New(Config{Capacity: 1 << 30, IPCHandleTypes: gpu.HandlePOSIX | gpu.HandleFabric, NoIMEXChannel: true}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	d := gd.(*Device)
	counts := func() (listed, resolved int) {
		d.mu.Lock()
		listed = len(d.pools)
		d.mu.Unlock()
		d.foreign.mu.Lock()
		resolved = len(d.foreign.pools)
		d.foreign.mu.Unlock()
		return listed, resolved
	}
	l0, r0 := counts()
	for _, ht := range []gpu.HandleType{gpu.HandleFabric, gpu.HandlePOSIX | gpu.HandleFabric} {
		if p, err := d.NewExportableMemPool(ht); !errors.Is(err, gpu.ErrNotPermitted) || p != nil {
			t.Errorf("NewExportableMemPool(%#x) without an IMEX channel: a pool %t, %v; want none, ErrNotPermitted", int32(ht), p != nil, err)
		}
	}
	if l, r := counts(); l != l0 || r != r0 {
		t.Errorf("after the refusals the device lists %d pools and resolves %d, %d and %d before", l, r, l0, r0)
	}
	p, err := d.NewExportableMemPool(gpu.HandlePOSIX)
	if err != nil {
		t.Fatal(err)
	}
	if l, r := counts(); l != l0+1 || r != r0+1 {
		t.Errorf("after a POSIX pool the device lists %d pools and resolves %d, want %d and %d", l, r, l0+1, r0+1)
	}
	if err := p.Destroy(); err != nil {
		t.Fatal(err)
	}
}
