package mr

import (
	"errors"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// checksBackend has two simulated devices, for streams of the right and
// the wrong device.
var checksBackend = sim.New(sim.Config{Devices: 2})

// checksStream returns device ordinal of checksBackend and a new stream
// on it.
func checksStream(t *testing.T, ordinal int) (gpu.Device, gpu.Stream) {
	t.Helper()
	dev, err := checksBackend.Device(ordinal)
	if err != nil {
		t.Fatal(err)
	}
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return dev, s
}

// TestChecks runs the argument checks on every kind of bad input, in the
// order args.go states: the stream before the size, the size before the
// null pointer.
func TestChecks(t *testing.T) {
	dev, s := checksStream(t, 0)
	_, os := checksStream(t, 1)

	alloc := []struct {
		name     string
		size     int
		s        gpu.Stream
		wantZero bool
		want     error
		msg      string
	}{
		{"valid", 100, s, false, nil, ""},
		{"zero", 0, s, true, nil, ""},
		{"nil stream", 100, nil, false, gpu.ErrInvalidHandle, "r: allocate: nil stream"},
		{"nil stream before negative size", -1, nil, false, gpu.ErrInvalidHandle, "r: allocate: nil stream"},
		{"other device", 100, os, false, gpu.ErrWrongDevice, "r: allocate: stream "},
		{"other device before negative size", -1, os, false, gpu.ErrWrongDevice, "r: allocate: stream "},
		{"negative", -1, s, false, ErrInvalidSize, "r: allocate -1 bytes"},
	}
	for _, c := range alloc {
		zero, err := checkAlloc("r", dev, c.size, c.s)
		if zero != c.wantZero || !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("checkAlloc %s: zero %v, %v; want %v, %v", c.name, zero, err, c.wantZero, c.want)
		}
		if err != nil && !strings.HasPrefix(err.Error(), c.msg) {
			t.Errorf("checkAlloc %s: message %q, want prefix %q", c.name, err, c.msg)
		}
	}

	free := []struct {
		name     string
		p        gpu.DevicePtr
		size     int
		s        gpu.Stream
		wantNull bool
		want     error
		msg      string
	}{
		{"valid", 0x1000, 100, s, false, nil, ""},
		{"valid size 0", 0x1000, 0, s, false, nil, ""},
		{"null", 0, 0, s, true, nil, ""},
		{"null with a size", 0, 8, s, false, ErrSizeMismatch, "r: deallocate null pointer as 8 bytes"},
		{"nil stream", 0x1000, 100, nil, false, gpu.ErrInvalidHandle, "r: deallocate: nil stream"},
		{"nil stream before null", 0, 8, nil, false, gpu.ErrInvalidHandle, "r: deallocate: nil stream"},
		{"other device", 0x1000, -1, os, false, gpu.ErrWrongDevice, "r: deallocate: stream "},
		{"negative", 0x1000, -1, s, false, ErrInvalidSize, "r: deallocate -1 bytes"},
		{"negative before null", 0, -1, s, false, ErrInvalidSize, "r: deallocate -1 bytes"},
	}
	for _, c := range free {
		null, err := checkFree("r", dev, c.p, c.size, c.s)
		if null != c.wantNull || !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("checkFree %s: null %v, %v; want %v, %v", c.name, null, err, c.wantNull, c.want)
		}
		if err != nil && !strings.HasPrefix(err.Error(), c.msg) {
			t.Errorf("checkFree %s: message %q, want prefix %q", c.name, err, c.msg)
		}
	}
}

// TestChecksAllocateNothing: a check that passes builds no message.
func TestChecksAllocateNothing(t *testing.T) {
	dev, s := checksStream(t, 0)
	name := strings.Repeat("r", 3) // not a constant
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := checkAlloc(name, dev, 4096, s); err != nil {
			t.Fatal(err)
		}
		if _, err := checkFree(name, dev, 0x1000, 4096, s); err != nil {
			t.Fatal(err)
		}
		if null, err := checkFree(name, dev, 0, 0, s); !null || err != nil {
			t.Fatal(null, err)
		}
	})
	if allocs != 0 {
		t.Errorf("passing checks: %v allocations, want 0", allocs)
	}
}

// TestKnownStreams: the remembered check answers as streamOK does, for a
// stream seen before and after, for streams of another device (which are
// never remembered), and for nil, and its checks give the same errors as
// checkAlloc and checkFree.
func TestKnownStreams(t *testing.T) {
	dev, s := checksStream(t, 0)
	_, os := checksStream(t, 1)
	var k knownStreams
	for round := range 3 {
		for _, c := range []struct {
			s    gpu.Stream
			want bool
		}{{s, true}, {os, false}, {nil, false}} {
			if got := k.ok(dev, c.s); got != c.want || got != streamOK(dev, c.s) {
				t.Errorf("round %d: ok(%v) = %v, want %v", round, c.s, got, c.want)
			}
		}
	}
	// Streams that share a slot take it in turn and stay right.
	var many []gpu.Stream
	for range 100 {
		_, x := checksStream(t, 0)
		many = append(many, x)
	}
	for range 2 {
		for _, x := range many {
			if !k.ok(dev, x) || k.ok(dev, os) {
				t.Fatal("a stream's answer changed")
			}
		}
	}
	for _, c := range []struct {
		s    gpu.Stream
		size int
		p    gpu.DevicePtr
	}{{s, 8, 0x100}, {os, 8, 0x100}, {nil, 8, 0x100}, {s, -1, 0x100}, {s, 0, 0}, {s, 8, 0}} {
		z1, e1 := k.checkAlloc("x", dev, c.size, c.s)
		z2, e2 := checkAlloc("x", dev, c.size, c.s)
		if z1 != z2 || (e1 == nil) != (e2 == nil) || e1 != nil && e1.Error() != e2.Error() {
			t.Errorf("checkAlloc(%d, %v): %v %v, want %v %v", c.size, c.s, z1, e1, z2, e2)
		}
		n1, f1 := k.checkFree("x", dev, c.p, c.size, c.s)
		n2, f2 := checkFree("x", dev, c.p, c.size, c.s)
		if n1 != n2 || (f1 == nil) != (f2 == nil) || f1 != nil && f1.Error() != f2.Error() {
			t.Errorf("checkFree(%#x, %d, %v): %v %v, want %v %v", c.p, c.size, c.s, n1, f1, n2, f2)
		}
	}
}
