package cudagpu_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/devarena"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/cudagpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// A nil *Event and a nil *MemPool say they have no device, as a nil
// *Stream does, without the driver.
func TestNilHandlesHaveNoDevice(t *testing.T) {
	var e *cudagpu.Event
	var p *cudagpu.MemPool
	if e.Device() != nil || p.Device() != nil {
		t.Errorf("nil event's device %v, nil pool's %v; want nil, nil", e.Device(), p.Device())
	}
}

// The entry points above the backend that take a stream or a pool refuse
// the backend's nil one (a nil pointer in a non-nil interface) as a nil
// handle, on the simulator, instead of panicking or taking it for a
// handle of another device.
func TestNilHandlesRefused(t *testing.T) {
	dev, err := sim.New(sim.Config{}).Device(0)
	ok(t, err)
	pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	ok(t, err)
	defer pool.Close()
	var s *cudagpu.Stream
	var p *cudagpu.MemPool
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"mr.NewAsync with a nil pool", func() error {
			r, err := mr.NewAsync(dev, mr.AsyncOptions{Pool: p})
			if r != nil {
				r.Close()
			}
			return err
		}},
		{"buf.New", func() error {
			b, err := buf.New(pool, 1024, s)
			if b != nil {
				b.Close()
			}
			return err
		}},
		{"devarena.New", func() error {
			a, err := devarena.New(pool, s, devarena.Config{Size: 1 << 20})
			if a != nil {
				a.Close()
			}
			return err
		}},
	} {
		if err := c.call(); !errors.Is(err, gpu.ErrInvalidHandle) {
			t.Errorf("%s: %v, want gpu.ErrInvalidHandle", c.name, err)
		}
	}
}
