package sanitize_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/gputest"
	_ "github.com/streamalloc/streamalloc/gpu/kernels" // registers the Go kernels
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/sanitize"
)

// The instrumented devices pass the peer-access suite: they forward
// gpu.Peer with devices and streams unwrapped, so the simulator sees its
// own devices, and the topology's refusals come through typed.
func TestPeerThroughSanitizer(t *testing.T) {
	be := sim.New(sim.Config{Devices: 3, Capacity: 1 << 30, PeerAccess: [][]bool{
		{false, true, false},
		{true, false, false},
		{false, false, false},
	}})
	var reports int
	z := sanitize.New(sanitize.Options{OnReport: func(*sanitize.Report) { reports++ }})
	devs := make([]gpu.Device, 3)
	for i := range devs {
		d, err := be.Device(i)
		must(t, err)
		devs[i] = z.Device(d)
	}
	gputest.RunPeer(t, devs[0], devs[1], devs[2])
	if reports != 0 {
		t.Errorf("%d sanitizer reports on correctly ordered work", reports)
	}
}

// The instrumented devices of two simulated processes pass the
// interprocess suites: events made or imported through gpu.IPC come back
// instrumented and unwrap on their way down.
func TestIPCThroughSanitizer(t *testing.T) {
	var reports int
	onReport := func(*sanitize.Report) { reports++ }
	exp, err := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
	must(t, err)
	imp, err := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
	must(t, err)
	ze := sanitize.New(sanitize.Options{OnReport: onReport}).Device(exp)
	zi := sanitize.New(sanitize.Options{OnReport: onReport}).Device(imp)
	gputest.RunIPC(t, ze, zi)
	gputest.RunIPCBadInput(t, ze)
	gputest.RunPhysicalSharing(t, ze, zi)
	if reports != 0 {
		t.Errorf("%d sanitizer reports on correctly ordered work", reports)
	}
	e, err := ze.NewIPCEvent()
	must(t, err)
	defer e.Destroy()
	if sanitize.Unwrap(e) == e {
		t.Errorf("NewIPCEvent returned %T, not an instrumented event", e)
	}
}

// A device underneath without peer access or interprocess memory makes
// every call of the instrumented one say gpu.ErrNotSupported.
func TestPeerIPCNotSupportedThroughSanitizer(t *testing.T) {
	raw, err := sim.New(sim.Config{}).Device(0)
	must(t, err)
	z := sanitize.New(sanitize.Options{}).Device(bareDevice{raw})
	for name, err := range map[string]error{
		"CanAccessPeer":    func() error { _, err := z.CanAccessPeer(raw); return err }(),
		"EnablePeerAccess": z.EnablePeerAccess(raw),
		"CopyPeerAsync":    z.CopyPeerAsync(0, raw, 0, raw, 1, nil),
		"NewIPCEvent":      func() error { _, err := z.NewIPCEvent(); return err }(),
		"ExportMem":        func() error { _, err := z.ExportMem(0); return err }(),
		"CloseMem":         z.CloseMem(0),
	} {
		if !errors.Is(err, gpu.ErrNotSupported) {
			t.Errorf("%s: %v, want gpu.ErrNotSupported", name, err)
		}
	}
}

// bareDevice hides every optional interface of the device it holds.
type bareDevice struct{ gpu.Device }
