package mr_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/internal/testdev"
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

// AsyncOptions.Exportable with fabric handles in a process that may not
// make fabric memory (no IMEX channel) is the backend's refusal,
// gpu.ErrNotPermitted, with no resource and nothing left allocated: no
// pool is made, since the driver would crash destroying it. With a channel
// the resource is made and its pool exports as fabric. On the device
// STREAMALLOC_DEVICE selects, either answer passes where fabric is
// offered.
func TestAsyncExportableFabric(t *testing.T) {
	const both = gpu.HandlePOSIX | gpu.HandleFabric
	simDev := func(noIMEX bool) gpu.Device {
		d, err := sim.New(sim.Config{Capacity: 1 << 30, IPCHandleTypes: both, NoIMEXChannel: noIMEX}).Device(0)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, c := range []struct {
		name string
		dev  func(t *testing.T) gpu.Device
		want string // "refused", "made", or "either"
	}{
		{"without an IMEX channel", func(*testing.T) gpu.Device { return simDev(true) }, "refused"},
		{"with an IMEX channel", func(*testing.T) gpu.Device { return simDev(false) }, "made"},
		{"the test device", func(t *testing.T) gpu.Device { return testdev.Device(t) }, "either"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev := c.dev(t)
			x, err := gpu.IPCOf(dev)
			if err != nil {
				t.Fatal(err)
			}
			offered, err := x.ExportHandleTypes()
			if err != nil {
				t.Fatal(err)
			}
			if offered&gpu.HandleFabric == 0 {
				t.Skipf("the device offers handle types %#x, no fabric", int32(offered))
			}
			if err := dev.Synchronize(); err != nil {
				t.Fatal(err)
			}
			free0, _, err := dev.MemGetInfo()
			if err != nil {
				t.Fatal(err)
			}
			for _, ht := range []gpu.HandleType{gpu.HandleFabric, offered & both} {
				r, err := mr.NewAsync(dev, mr.AsyncOptions{Exportable: ht})
				if err != nil {
					t.Logf("Exportable %#x: %v", int32(ht), err)
					if c.want == "made" || !errors.Is(err, gpu.ErrNotPermitted) || r != nil {
						t.Errorf("Exportable %#x: %v (a resource %t), want it made or refused with gpu.ErrNotPermitted and none", int32(ht), err, r != nil)
					}
					if free, _, err := dev.MemGetInfo(); err != nil || free != free0 {
						t.Errorf("free memory %d (%v) after the refusal, %d before", free, err, free0)
					}
					continue
				}
				if c.want == "refused" {
					t.Errorf("Exportable %#x made without an IMEX channel", int32(ht))
				}
				sh, err := x.ExportMemPool(r.Pool(), gpu.HandleFabric)
				if err != nil || sh.Type != gpu.HandleFabric || sh.File != nil {
					t.Errorf("exporting the resource's pool as fabric: %+v, %v", sh, err)
				}
				if err := r.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}
		})
	}
}
