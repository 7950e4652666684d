// Package gputest is the conformance suite of the gpu backend interface.
//
// Run checks a gpu.Device against what the CUDA driver guarantees, using
// nothing but the gpu interface and the built-in kernels (gpu/kernels), so
// the same suite runs on the simulator (gpu/sim's tests, in `go test
// ./...`) and on a real GPU (gpu/cudagpu's tests). It asserts behaviour
// the card guarantees, never simulator internals: stream order, event
// ordering, data written by kernels and copies, pool attributes, errors
// for bad input, and that the device stays usable after an error.
//
// The cases, as Run names its subtests:
//
//	Properties          name, memory and ordinal; MemGetInfo consistent
//	NotebookLoop        allocate 4 MiB in stream order, fill, check, free,
//	                    100 times on one stream; the check kernel can fail
//	EventOrdersStreams  a write on S1 behind a 50 ms spin is seen by a read
//	                    on S2 after an event wait
//	AllocS1FreeS2Reuse  memory allocated on S1 and freed on S2, each step
//	                    ordered by events, 20 rounds: the pool's reserved
//	                    high-water mark does not grow
//	PoolAttributes      release threshold, reuse policies, used/reserved
//	                    current and high-water, TrimTo, reset; bad ones refused
//	OutOfMemory         1 PiB from Malloc, MallocAsync and a pool of its own;
//	                    the device and the stream work after
//	CopiesAndMemset     copies in every direction and sets, odd sizes
//	ManagedAndHost      managed memory and page-locked host memory
//	QueryNotReady       stream and event queries while a kernel runs
//	TimingEvents        elapsed time around a kernel; not ready before it ends
//	Streams             distinct non-zero IDs; Destroy lets enqueued work finish
//	BadInput            nil, foreign and destroyed handles, bad sizes and
//	                    launch arguments: typed errors, nothing changed
package gputest

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
)

// Run runs the conformance suite on dev as subtests of t.
func Run(t *testing.T, dev gpu.Device) {
	t.Helper()
	if dev == nil {
		t.Fatal("gputest: nil device")
	}
	for _, c := range []struct {
		name string
		fn   func(*testing.T, gpu.Device)
	}{
		{"Properties", testProperties},
		{"NotebookLoop", testNotebookLoop},
		{"EventOrdersStreams", testEventOrdersStreams},
		{"AllocS1FreeS2Reuse", testAllocS1FreeS2Reuse},
		{"PoolAttributes", testPoolAttributes},
		{"OutOfMemory", testOutOfMemory},
		{"CopiesAndMemset", testCopiesAndMemset},
		{"ManagedAndHost", testManagedAndHost},
		{"QueryNotReady", testQueryNotReady},
		{"TimingEvents", testTimingEvents},
		{"Streams", testStreams},
		{"BadInput", testBadInput},
		{"Capture", RunCapture},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, dev) })
	}
}

// must fails the test on err.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantErr checks that err matches target.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want one matching %v", what, err, target)
	}
}

func newStream(t *testing.T, dev gpu.Device) gpu.Stream {
	t.Helper()
	s, err := dev.NewStream()
	must(t, err)
	t.Cleanup(func() {
		if err := s.Synchronize(); err != nil && !errors.Is(err, gpu.ErrDestroyed) {
			t.Errorf("cleanup: synchronize stream: %v", err)
		}
		if err := s.Destroy(); err != nil && !errors.Is(err, gpu.ErrDestroyed) {
			t.Errorf("cleanup: destroy stream: %v", err)
		}
	})
	return s
}

func newEvent(t *testing.T, dev gpu.Device, timing bool) gpu.Event {
	t.Helper()
	e, err := dev.NewEvent(timing)
	must(t, err)
	t.Cleanup(func() {
		if err := e.Destroy(); err != nil && !errors.Is(err, gpu.ErrDestroyed) {
			t.Errorf("cleanup: destroy event: %v", err)
		}
	})
	return e
}

func load(t *testing.T, dev gpu.Device) *kernels.Kernels {
	t.Helper()
	k, err := kernels.Load(dev)
	must(t, err)
	return k
}

// counter is a device uint32 for Check's mismatch count.
type counter struct {
	dev gpu.Device
	p   gpu.DevicePtr
}

func newCounter(t *testing.T, dev gpu.Device, s gpu.Stream) counter {
	t.Helper()
	p, err := dev.Malloc(4)
	must(t, err)
	t.Cleanup(func() {
		if err := dev.Free(p); err != nil {
			t.Errorf("cleanup: free counter: %v", err)
		}
	})
	must(t, dev.MemsetD8Async(p, 0, 4, s))
	return counter{dev, p}
}

// read synchronizes s and returns the count.
func (c counter) read(t *testing.T, s gpu.Stream) uint32 {
	t.Helper()
	var b [4]byte
	must(t, c.dev.CopyDtoHAsync(b[:], c.p, s))
	must(t, s.Synchronize())
	return binary.LittleEndian.Uint32(b[:])
}

// words decodes little-endian uint32s.
func words(b []byte) []uint32 {
	w := make([]uint32, len(b)/4)
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return w
}

// checkPattern reports the first word of b that is not seed+i.
func checkPattern(t *testing.T, what string, b []byte, seed uint32) {
	t.Helper()
	for i, w := range words(b) {
		if w != seed+uint32(i) {
			t.Fatalf("%s: word %d = %#x, want %#x", what, i, w, seed+uint32(i))
		}
	}
}
