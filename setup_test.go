package streamalloc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc"
	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/backend"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/registry"
)

func simDevices(t *testing.T, cfg sim.Config) []gpu.Device {
	t.Helper()
	b := sim.New(cfg)
	n, err := b.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	var out []gpu.Device
	for i := range n {
		d, err := b.Device(i)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

func newStream(t *testing.T, d gpu.Device) gpu.Stream {
	t.Helper()
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return s
}

func chainNames(r mr.Resource) string {
	var names []string
	for _, l := range mr.StatsOf(r).Levels {
		names = append(names, l.Name)
	}
	return strings.Join(names, " > ")
}

// TestSetup: the default stack, installed as the current resource, used by
// buf.New without a resource, summarized, and taken down by Close.
func TestSetup(t *testing.T) {
	devs := simDevices(t, sim.Config{Devices: 2, Capacity: 1 << 30})
	before := []mr.Resource{mr.Current(devs[0]), mr.Current(devs[1])}
	h, err := streamalloc.Setup(streamalloc.Config{Use: devs, Stats: true, Tracking: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range devs {
		top, err := h.Resource(i)
		if err != nil {
			t.Fatal(err)
		}
		if got := chainNames(top); got != "tracking > stats > retry > pool > async" {
			t.Errorf("device %d: stack %s", i, got)
		}
		if mr.Current(d) != top {
			t.Errorf("device %d: current resource %v, want the handle's", i, mr.Current(d))
		}
		if got, err := h.Device(i); got != d || err != nil {
			t.Errorf("Device(%d) = %v, %v", i, got, err)
		}
	}
	if err := h.WriteSnapshot(0, io.Discard); !errors.Is(err, streamalloc.ErrNoHistory) {
		t.Errorf("WriteSnapshot without history: %v", err)
	}
	if got := h.Resources(); len(got) != 2 || got[0] != mr.Current(devs[0]) || got[1] != mr.Current(devs[1]) {
		t.Errorf("Resources() = %v", got)
	}
	if got := h.Devices(); len(got) != 2 || got[0] != devs[0] || got[1] != devs[1] {
		t.Errorf("Devices() = %v", got)
	}

	s := newStream(t, devs[1])
	v, err := buf.NewVector[float32](nil, 1<<20, s)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := h.Stats(1)
	if err != nil {
		t.Fatal(err)
	}
	if st := cs.Levels[1].Stats; st == nil || st.Bytes.Current != 4<<20 || st.Allocations.Current != 1 {
		t.Fatalf("device 1 stats %+v", cs.Levels[1].Stats)
	}
	sum := h.Summary()
	if strings.Count(sum, "streamalloc memory summary: device ") != 2 ||
		!strings.Contains(sum, "chain: tracking > stats > retry > pool > async") ||
		!strings.Contains(sum, "1 allocation live (4.0 MiB) from 1 call site") {
		t.Errorf("summary:\n%s", sum)
	}
	if line := h.String(); !strings.Contains(line, "device 1: tracking > stats > retry > pool > async: reserved ") ||
		!strings.Contains(line, "used 4.0 MiB (peak 4.0 MiB)") {
		t.Errorf("String() = %q", line)
	}

	// The async pool below refuses to close under a live allocation:
	// Close says so, and closes once it is freed.
	if err := h.Close(); err == nil || !strings.Contains(err.Error(), "still live") {
		t.Fatalf("Close with a live vector: %v", err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("Close after freeing: %v", err)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for i, d := range devs {
		if mr.Current(d) != before[i] {
			t.Errorf("device %d: current resource not restored: %v", i, mr.Current(d))
		}
	}
	if _, err := h.Resource(0); !errors.Is(err, streamalloc.ErrClosed) {
		t.Errorf("Resource after Close: %v", err)
	}
	if _, err := h.Stats(0); !errors.Is(err, streamalloc.ErrClosed) {
		t.Errorf("Stats after Close: %v", err)
	}
	if err := h.WriteSummary(&strings.Builder{}); !errors.Is(err, streamalloc.ErrClosed) {
		t.Errorf("WriteSummary after Close: %v", err)
	}
}

// TestSetupMemoryFraction: a quarter of a 1 GiB device is a 256 MiB
// budget, whatever the resource below would grant.
func TestSetupMemoryFraction(t *testing.T) {
	dev := simDevices(t, sim.Config{Capacity: 1 << 30})[0]
	var reports []mr.OutOfMemoryReport
	h, err := streamalloc.Setup(streamalloc.Config{Use: []gpu.Device{dev}, MemoryFraction: 0.25, RetryAttempts: -1,
		Stats: true, OnOutOfMemory: func(rep mr.OutOfMemoryReport) { reports = append(reports, rep) }})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	s := newStream(t, dev)
	a, err := buf.New(nil, 200<<20, s)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	_, err = buf.New(nil, 100<<20, s)
	var oom *mr.OutOfMemoryError
	if !errors.Is(err, mr.ErrOutOfMemory) || !errors.As(err, &oom) || oom.Resource != "limit" || oom.Limit != 256<<20 {
		t.Fatalf("over a quarter of the device: %v", err)
	}
	top, _ := h.Resource(0)
	if got := chainNames(top); got != "stats > retry > limit > pool > async" {
		t.Errorf("stack %s", got)
	}
	// The observer saw the refusal with the whole stack.
	if len(reports) != 1 || !errors.Is(reports[0].Err, mr.ErrOutOfMemory) || reports[0].Size != 100<<20 ||
		!strings.Contains(reports[0].Summary(), "chain: stats > retry > limit > pool > async\n") ||
		!strings.Contains(reports[0].Summary(), "budget 256.0 MiB: 200.0 MiB charged") {
		t.Fatalf("reports %v", reports)
	}
}

// TestSetupOptions: the resource by name over either upstream, a
// constructor of the caller's, KeepCurrent, and the backend by name.
func TestSetupOptions(t *testing.T) {
	dev := simDevices(t, sim.Config{})[0]
	prev := mr.Current(dev)
	for _, c := range []struct {
		cfg  streamalloc.Config
		want string
	}{
		{streamalloc.Config{Resource: "arena", Upstream: "direct"}, "retry > arena > direct"},
		{streamalloc.Config{Resource: "async", RetryAttempts: 1}, "retry > async"},
		{streamalloc.Config{Resource: "binning", Stats: true}, "stats > retry > binning > async"},
		{streamalloc.Config{New: func(d gpu.Device) (mr.Resource, func() error, error) {
			return mr.NewManaged(d), nil, nil
		}}, "retry > managed"},
	} {
		c.cfg.Use = []gpu.Device{dev}
		c.cfg.KeepCurrent = true
		h, err := streamalloc.Setup(c.cfg)
		if err != nil {
			t.Fatalf("%+v: %v", c.cfg, err)
		}
		top, _ := h.Resource(0)
		if got := chainNames(top); got != c.want {
			t.Errorf("stack %s, want %s", got, c.want)
		}
		if mr.Current(dev) != prev {
			t.Errorf("KeepCurrent changed the current resource to %v", mr.Current(dev))
		}
		if err := h.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}

	h, err := streamalloc.Setup(streamalloc.Config{Backend: "sim", Devices: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := h.Device(0)
	if !d.Properties().Simulated {
		t.Error("Backend sim gave a device that is not simulated")
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSetupErrors: each bad configuration is refused with its error, and
// leaves no current resource changed.
func TestSetupErrors(t *testing.T) {
	dev := simDevices(t, sim.Config{})[0]
	prev := mr.Current(dev)
	use := []gpu.Device{dev}
	errNew := errors.New("the caller's constructor failed")
	for _, c := range []struct {
		name string
		cfg  streamalloc.Config
		want []error
	}{
		{"negative history", streamalloc.Config{Use: use, History: -1}, []error{streamalloc.ErrConfig}},
		{"negative fraction", streamalloc.Config{Use: use, MemoryFraction: -0.1}, []error{streamalloc.ErrConfig}},
		{"fraction above 1", streamalloc.Config{Use: use, MemoryFraction: 1.5}, []error{streamalloc.ErrConfig}},
		{"unknown resource", streamalloc.Config{Use: use, Resource: "slab"}, []error{streamalloc.ErrConfig, registry.ErrUnknown}},
		{"unknown upstream", streamalloc.Config{Use: use, Upstream: "managed"}, []error{streamalloc.ErrConfig}},
		{"unknown backend", streamalloc.Config{Backend: "opencl"}, []error{backend.ErrUnknownKind}},
		{"no such device", streamalloc.Config{Backend: "sim", Devices: []int{3}}, []error{gpu.ErrInvalidDevice}},
		{"device twice", streamalloc.Config{Backend: "sim", Devices: []int{0, 0}}, []error{streamalloc.ErrConfig}},
		{"nil device", streamalloc.Config{Use: []gpu.Device{nil}}, []error{streamalloc.ErrConfig, gpu.ErrInvalidHandle}},
		{"device twice in Use", streamalloc.Config{Use: []gpu.Device{dev, dev}}, []error{streamalloc.ErrConfig}},
		{"constructor fails", streamalloc.Config{Use: use, New: func(gpu.Device) (mr.Resource, func() error, error) {
			return nil, nil, errNew
		}}, []error{errNew}},
		{"constructor returns nothing", streamalloc.Config{Use: use, New: func(gpu.Device) (mr.Resource, func() error, error) {
			return nil, nil, nil
		}}, []error{streamalloc.ErrConfig}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := streamalloc.Setup(c.cfg)
			if h != nil || err == nil {
				t.Fatalf("Setup = %v, %v", h, err)
			}
			for _, w := range c.want {
				if !errors.Is(err, w) {
					t.Errorf("error %v does not match %v", err, w)
				}
			}
			if mr.Current(dev) != prev {
				t.Errorf("a failed Setup changed the current resource")
			}
		})
	}
}

// TestSetupFailsOnSecondDevice: when the second device fails, the first
// device's stack is closed and no current resource is changed.
func TestSetupFailsOnSecondDevice(t *testing.T) {
	devs := simDevices(t, sim.Config{Devices: 2})
	prev := mr.Current(devs[0])
	var closed []int
	_, err := streamalloc.Setup(streamalloc.Config{Use: devs, New: func(d gpu.Device) (mr.Resource, func() error, error) {
		if d == devs[1] {
			return nil, nil, fmt.Errorf("device 1: %w", gpu.ErrOutOfMemory)
		}
		return mr.NewDirect(d), func() error { closed = append(closed, d.Ordinal()); return nil }, nil
	}})
	if !errors.Is(err, gpu.ErrOutOfMemory) {
		t.Fatalf("Setup: %v", err)
	}
	if len(closed) != 1 || closed[0] != 0 {
		t.Errorf("closed %v, want device 0's stack", closed)
	}
	if mr.Current(devs[0]) != prev {
		t.Error("the current resource of device 0 changed")
	}
}

// TestSetupCloseContext: Close waits for the frees still running; with a
// context that ends first it gives up, leaves the stack open, and
// finishes when called again.
func TestSetupCloseContext(t *testing.T) {
	dev := simDevices(t, sim.Config{})[0]
	h, err := streamalloc.Setup(streamalloc.Config{Use: []gpu.Device{dev}, Resource: "async"})
	if err != nil {
		t.Fatal(err)
	}
	s := newStream(t, dev)
	b, err := buf.New(nil, 1<<20, s)
	if err != nil {
		t.Fatal(err)
	}
	release := dev.(*sim.Device).Hold(s)
	defer release()
	if err := b.Close(); err != nil { // enqueued behind the hold
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := h.CloseContext(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CloseContext behind a held free: %v", err)
	}
	if _, err := h.Resource(0); err != nil {
		t.Fatalf("the handle closed although its close gave up: %v", err)
	}
	release()
	if err := h.Close(); err != nil {
		t.Fatalf("Close once the free ran: %v", err)
	}
	if _, err := h.Resource(0); !errors.Is(err, streamalloc.ErrClosed) {
		t.Fatalf("Resource after Close: %v", err)
	}
}

// TestSetupHistory: the history adaptor sits below Stats and records what
// the program did; the snapshot reaches the pool's chunks below Retry.
func TestSetupHistory(t *testing.T) {
	dev := simDevices(t, sim.Config{})[0]
	h, err := streamalloc.Setup(streamalloc.Config{Use: []gpu.Device{dev}, Stats: true, History: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	top, _ := h.Resource(0)
	if got := chainNames(top); got != "stats > history > retry > pool > async" {
		t.Errorf("stack %s", got)
	}
	s := newStream(t, dev)
	b, err := buf.New(nil, 5000, s)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var out strings.Builder
	if err := h.WriteSnapshot(0, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "\x80\x02") || !strings.Contains(out.String(), "active_allocated") {
		t.Errorf("snapshot does not look like a pickle with a live block: %q", out.String()[:min(64, out.Len())])
	}
	if !strings.Contains(h.Summary(), "history\n  1 event recorded, 1 kept (ring of 100)\n") {
		t.Errorf("summary:\n%s", h.Summary())
	}
	path := t.TempDir() + "/snap.pickle"
	if err := h.DumpSnapshot(0, path); err != nil {
		t.Fatal(err)
	}
	if err := h.DumpSnapshot(0, t.TempDir()+"/no/such/dir/snap.pickle"); err == nil {
		t.Error("DumpSnapshot into a missing directory succeeded")
	}
}
