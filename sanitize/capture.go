// Capture on the instrumented device: streams, graphs and graph memory
// pass through to the real device, with handles unwrapped, and the
// sanitizer models what a capture records and what each launch of its
// graph does (graph.go): BeginCapture starts the model, EndCapture checks
// the graph on its own (in refusing mode a graph with reports is destroyed
// and the report returned instead), and a launch through an executable of
// the graph is checked before it is made (in refusing mode a launch with
// reports is not made) and applied to the model after.

package sanitize

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

var (
	_ gpu.CaptureStream = (*stream)(nil)
	_ gpu.GraphDevice   = (*Device)(nil)
)

// BeginCapture begins a capture on the real stream; the sanitizer models
// it (graph.go).
func (s *stream) BeginCapture(mode gpu.CaptureMode) error {
	if err := gpu.BeginCapture(s.Stream, mode); err != nil {
		return err
	}
	s.d.z.beginCapture(s)
	return nil
}

// EndCapture ends the capture on the real stream and checks the graph on
// its own; in refusing mode a graph with reports is destroyed and the
// report returned. The graph's executables launch on instrumented
// streams, checked and modelled.
func (s *stream) EndCapture() (gpu.Graph, error) {
	id := gpu.CaptureID(s.Stream)
	g, err := gpu.EndCapture(s.Stream)
	if err != nil && id != 0 && gpu.CaptureID(s.Stream) == id {
		return nil, err // not ended: the capture goes on
	}
	m, rerr := s.d.z.endCapture(id, err == nil)
	if err != nil {
		return nil, err
	}
	if rerr != nil {
		if derr := g.Destroy(); derr != nil {
			return nil, fmt.Errorf("%w (and destroying the graph: %v)", rerr, derr)
		}
		return nil, rerr
	}
	return &graph{Graph: g, d: s.d, m: m}, nil
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
	m *graphModel // nil: not modelled
}

func (g *graph) Device() gpu.Device { return g.d }

func (g *graph) Instantiate(flags gpu.InstantiateFlags) (gpu.GraphExec, error) {
	x, err := g.Graph.Instantiate(flags)
	if err != nil {
		return nil, err
	}
	gx := &graphExec{GraphExec: x, d: g.d}
	if g.m != nil {
		gx.m = newExec(g.m)
	}
	return gx, nil
}

type graphExec struct {
	gpu.GraphExec
	d *Device
	m *execModel // nil: not modelled
}

func (x *graphExec) Device() gpu.Device { return x.d }

// Launch launches on the real stream; a modelled graph's launch is checked
// first (in refusing mode a launch with reports is not made) and applied
// to the model after.
func (x *graphExec) Launch(s gpu.Stream) error {
	if x.m == nil || s == nil {
		return x.GraphExec.Launch(unwrapStream(s))
	}
	return x.d.z.launch(x.m, s, func() error { return x.GraphExec.Launch(unwrapStream(s)) })
}

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
