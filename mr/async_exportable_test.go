package mr_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// AsyncOptions.Exportable makes a pool of the resource's own that other
// processes can import, destroyed by Close; it excludes the other pool
// choices, and a handle type the device does not offer is refused.
func TestAsyncExportable(t *testing.T) {
	dev, err := sim.New(sim.Config{}).Device(0) // offers POSIX descriptors only
	if err != nil {
		t.Fatal(err)
	}
	x, err := gpu.IPCOf(dev)
	if err != nil {
		t.Fatal(err)
	}
	r, err := mr.NewAsync(dev, mr.AsyncOptions{Exportable: gpu.HandlePOSIX})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := x.ExportMemPool(r.Pool(), gpu.HandlePOSIX)
	if err != nil {
		t.Fatalf("exporting the resource's pool: %v", err)
	}
	sh.File.Close()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Pool().Attribute(gpu.PoolReservedMemCurrent); !errors.Is(err, gpu.ErrDestroyed) {
		t.Errorf("the exportable pool after Close: %v, want gpu.ErrDestroyed", err)
	}

	other, err := dev.NewMemPool()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Destroy()
	noIPC, err := sim.New(sim.Config{IPCHandleTypes: -1}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		dev  gpu.Device
		opts mr.AsyncOptions
		want error
	}{
		{"a handle type the device does not offer", dev, mr.AsyncOptions{Exportable: gpu.HandleFabric}, gpu.ErrNotSupported},
		{"a device that exports nothing", noIPC, mr.AsyncOptions{Exportable: gpu.HandlePOSIX}, gpu.ErrNotSupported},
		{"a device without interprocess memory", hideIPC{dev}, mr.AsyncOptions{Exportable: gpu.HandlePOSIX}, gpu.ErrNotSupported},
		{"and a given pool", dev, mr.AsyncOptions{Exportable: gpu.HandlePOSIX, Pool: other}, gpu.ErrInvalidValue},
		{"and the current pool", dev, mr.AsyncOptions{Exportable: gpu.HandlePOSIX, CurrentPool: true}, gpu.ErrInvalidValue},
		{"and a managed pool", dev, mr.AsyncOptions{Exportable: gpu.HandlePOSIX, ManagedPool: true}, gpu.ErrInvalidValue},
	} {
		if r, err := mr.NewAsync(c.dev, c.opts); !errors.Is(err, c.want) {
			if err == nil {
				r.Close()
			}
			t.Errorf("exportable, %s: %v, want %v", c.name, err, c.want)
		}
	}
}

// hideIPC is a device with its optional interfaces hidden.
type hideIPC struct{ gpu.Device }
