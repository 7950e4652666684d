// Capture on the instrumented device: streams, graphs and graph memory
// pass through to the real device, with handles unwrapped.
//
// The sanitizer does not model what a graph does: work captured into a
// graph is not checked when it is captured (nothing runs then) and a launch
// of an executable graph is one opaque piece of stream work to it. Orderings
// a capture creates (an event recorded in a capture and waited on by
// another stream) are recorded as usual, which is what they mean on
// replay.

package sanitize

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

var (
	_ gpu.CaptureStream = (*stream)(nil)
	_ gpu.GraphDevice   = (*Device)(nil)
)

// BeginCapture begins a capture on the real stream.
func (s *stream) BeginCapture(mode gpu.CaptureMode) error { return gpu.BeginCapture(s.Stream, mode) }

// EndCapture ends the capture on the real stream; the graph's executables
// launch on instrumented streams.
func (s *stream) EndCapture() (gpu.Graph, error) {
	g, err := gpu.EndCapture(s.Stream)
	if err != nil {
		return nil, err
	}
	return &graph{Graph: g, d: s.d}, nil
}

// CaptureID is the real stream's.
func (s *stream) CaptureID() uint64 { return gpu.CaptureID(s.Stream) }

// CaptureStatus is the real stream's.
func (s *stream) CaptureStatus() (gpu.CaptureStatus, error) {
	cs, ok := s.Stream.(gpu.CaptureStream)
	if !ok {
		return gpu.CaptureNone, fmt.Errorf("sanitize: CaptureStatus: stream %T cannot be captured: %w", s.Stream, gpu.ErrNotSupported)
	}
	return cs.CaptureStatus()
}

type graph struct {
	gpu.Graph
	d *Device
}

func (g *graph) Device() gpu.Device { return g.d }

func (g *graph) Instantiate(flags gpu.InstantiateFlags) (gpu.GraphExec, error) {
	x, err := g.Graph.Instantiate(flags)
	if err != nil {
		return nil, err
	}
	return &graphExec{GraphExec: x, d: g.d}, nil
}

type graphExec struct {
	gpu.GraphExec
	d *Device
}

func (x *graphExec) Device() gpu.Device { return x.d }

// Launch launches on the real stream.
func (x *graphExec) Launch(s gpu.Stream) error { return x.GraphExec.Launch(unwrapStream(s)) }

func (d *Device) graphDevice(op string) (gpu.GraphDevice, error) {
	gd, ok := d.Device.(gpu.GraphDevice)
	if !ok {
		return nil, fmt.Errorf("sanitize: %s: device %T has no graph memory: %w", op, d.Device, gpu.ErrNotSupported)
	}
	return gd, nil
}

// GraphMemAttribute is the real device's.
func (d *Device) GraphMemAttribute(a gpu.GraphMemAttr) (uint64, error) {
	gd, err := d.graphDevice("GraphMemAttribute")
	if err != nil {
		return 0, err
	}
	return gd.GraphMemAttribute(a)
}

// SetGraphMemAttribute is the real device's.
func (d *Device) SetGraphMemAttribute(a gpu.GraphMemAttr, v uint64) error {
	gd, err := d.graphDevice("SetGraphMemAttribute")
	if err != nil {
		return err
	}
	return gd.SetGraphMemAttribute(a, v)
}

// GraphMemTrim is the real device's.
func (d *Device) GraphMemTrim() error {
	gd, err := d.graphDevice("GraphMemTrim")
	if err != nil {
		return err
	}
	return gd.GraphMemTrim()
}

// RelaxCapture is the real device's.
func (d *Device) RelaxCapture(fn func() error) error { return gpu.RelaxCapture(d.Device, fn) }

// CaptureActive is the real device's.
func (d *Device) CaptureActive() bool { return gpu.DeviceCapturing(d.Device) }
