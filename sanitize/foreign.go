// Foreign handles through the instrumented device: streams and events
// adopted from other code (package gpu's foreign handles) are instrumented
// like our own, so the sanitizer sees the orderings made on them.
//
// Invariant: one wrapper per real stream or event (Device.views), so that
// adopting a handle twice gives the same gpu.Stream, as on the real
// device; a wrapper leaves views when it is destroyed.

package sanitize

import "github.com/streamalloc/streamalloc/gpu"

// AdoptStream adopts raw on the real device and returns its instrumented
// wrapper (the one NewStream returned, for a stream of ours).
func (d *Device) AdoptStream(raw uintptr) (gpu.Stream, error) {
	s, err := d.Device.AdoptStream(raw)
	if err != nil {
		return nil, err
	}
	return d.streamView(s), nil
}

// AdoptEvent adopts raw on the real device and returns its instrumented
// wrapper.
func (d *Device) AdoptEvent(raw uintptr) (gpu.Event, error) {
	e, err := d.Device.AdoptEvent(raw)
	if err != nil {
		return nil, err
	}
	return d.eventView(e), nil
}

func (d *Device) streamView(s gpu.Stream) *stream {
	if v, ok := d.views.Load(s); ok {
		return v.(*stream)
	}
	v, _ := d.views.LoadOrStore(s, &stream{Stream: s, d: d})
	return v.(*stream)
}

func (d *Device) eventView(e gpu.Event) *event {
	if v, ok := d.views.Load(e); ok {
		return v.(*event)
	}
	v, _ := d.views.LoadOrStore(e, &event{Event: e, d: d})
	return v.(*event)
}

// Raw is the real stream's raw handle (0 if it has none).
func (s *stream) Raw() uintptr {
	r, _ := gpu.RawOf(s.Stream)
	return r
}

// Destroy destroys (or, adopted, forgets) the real stream and drops the
// wrapper.
func (s *stream) Destroy() error {
	err := s.Stream.Destroy()
	s.d.views.CompareAndDelete(s.Stream, s)
	return err
}

// Raw is the real event's raw handle (0 if it has none).
func (e *event) Raw() uintptr {
	r, _ := gpu.RawOf(e.Event)
	return r
}
