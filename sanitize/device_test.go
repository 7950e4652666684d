package sanitize_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/sanitize"
)

// TestDeviceWrapper: handles of the instrumented device keep their
// identity, unwrap to the real ones, and report orderings made through
// them (and only once when a buffer reports them too).
func TestDeviceWrapper(t *testing.T) {
	raw, err := sim.New(sim.Config{}).Device(0)
	must(t, err)
	var reps []*sanitize.Report
	z := sanitize.New(sanitize.Options{OnReport: func(r *sanitize.Report) { reps = append(reps, r) }})
	dev := z.Device(raw)
	if z.Device(raw) != dev || z.Device(dev) != dev {
		t.Fatalf("Device is not idempotent")
	}
	if sanitize.Unwrap[gpu.Device](dev) != raw {
		t.Fatalf("Unwrap(device) is not the real device")
	}
	s, err := dev.NewStream()
	must(t, err)
	defer s.Destroy()
	rs := sanitize.Unwrap(s)
	if rs == s || rs.ID() != s.ID() || s.Device() != dev || rs.Device() != raw {
		t.Fatalf("stream identity: wrapped %d, real %d", s.ID(), rs.ID())
	}
	e, err := dev.NewEvent(false)
	must(t, err)
	if re := sanitize.Unwrap(e); re == e || e.Device() != dev || re.Device() != raw {
		t.Fatalf("event identity")
	}
	// A raw stream given to the wrapper passes through.
	s2raw, err := raw.NewStream()
	must(t, err)
	defer s2raw.Destroy()
	p, err := dev.MallocAsync(256, s2raw)
	must(t, err)
	must(t, dev.FreeAsync(p, s2raw))

	// Orderings through the wrapper reach the sanitizer: a use on s2
	// after an event recorded on s is clean, without one it is not.
	a, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	must(t, err)
	defer a.Close()
	res := z.Resource(a)
	s2, err := dev.NewStream()
	must(t, err)
	defer s2.Destroy()
	q, err := res.Allocate(256, s)
	must(t, err)
	must(t, e.Record(s))
	must(t, s2.WaitEvent(e))
	must(t, z.Use(q, 256, s2, buf.Write))
	must(t, e.Synchronize())
	must(t, s.Query())
	if len(reps) != 0 {
		t.Fatalf("ordered use reported: %v", reps[0])
	}
	r, err := res.Allocate(256, s)
	must(t, err)
	must(t, z.Use(r, 256, s2, buf.Write))
	if len(reps) != 1 || !errors.Is(reps[0], sanitize.UseBeforeAlloc) {
		t.Fatalf("unordered use: %v", reps)
	}
	must(t, res.Deallocate(q, 256, s2))
	must(t, res.Deallocate(r, 256, s2))
	must(t, dev.Synchronize())
	must(t, e.Destroy())
	if len(reps) != 1 {
		t.Fatalf("reports after ordered frees: %v", reps[1:])
	}
}
