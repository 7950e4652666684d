package cudagpu_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/gputest"
)

// TestIPCBadInput runs the one-process interprocess refusals, which the
// simulator also passes, on the GPU, and logs the handle types the device
// offers (fabric where the system has it).
func TestIPCBadInput(t *testing.T) {
	_, d := needDevice(t)
	types, err := d.ExportHandleTypes()
	ok(t, err)
	t.Logf("device %d exports pools as handle types %#x (POSIX descriptor %v, fabric %v)",
		d.Ordinal(), int32(types), types&gpu.HandlePOSIX != 0, types&gpu.HandleFabric != 0)
	gputest.RunIPCBadInput(t, d)
}

// TestIPCFabricPool runs the conformance suite's fabric pool case on the
// GPU: where the device offers fabric handles, a pool exportable as fabric
// either works (the process has an IMEX channel) or is refused with
// gpu.ErrNotPermitted before any pool is made (the H100 this project is
// tested on, which would otherwise end the process destroying it).
func TestIPCFabricPool(t *testing.T) {
	_, d := needDevice(t)
	gputest.RunIPCFabric(t, d, gputest.IMEXUnknown)
}

// TestPeerConformance runs the peer-access suite on the first two devices
// that reach each other; it skips on a machine with one GPU, and checks
// that a device is not its own peer there.
func TestPeerConformance(t *testing.T) {
	b, d := needDevice(t)
	if can, err := d.CanAccessPeer(d); err != nil || can {
		t.Fatalf("CanAccessPeer(itself) = %v, %v", can, err)
	}
	if err := d.EnablePeerAccess(d); !errors.Is(err, gpu.ErrPeerUnsupported) {
		t.Fatalf("EnablePeerAccess(itself): %v, want gpu.ErrPeerUnsupported", err)
	}
	n, err := b.DeviceCount()
	ok(t, err)
	if n < 2 {
		t.Skipf("%d device: peer access needs two", n)
	}
	e, err := b.Device(1)
	ok(t, err)
	if can, err := d.CanAccessPeer(e); err != nil || !can {
		t.Skipf("device 0 cannot access device 1 (%v, %v)", can, err)
	}
	gputest.RunPeer(t, d, e, nil)
}
