// Checks every handle passes before its driver handle is used: not nil,
// of this backend and this device, not destroyed. The checks are a type
// assertion, a pointer comparison and an atomic load; they allocate only
// when they fail.

package cudagpu

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

func (d *Device) stream(op string, s gpu.Stream) (*Stream, error) {
	cs, ok := s.(*Stream)
	switch {
	case s == nil || (ok && cs == nil):
		return nil, fmt.Errorf("cudagpu: %s: nil stream: %w", op, gpu.ErrInvalidHandle)
	case !ok:
		return nil, fmt.Errorf("cudagpu: %s: stream %T is not a CUDA stream: %w", op, s, gpu.ErrWrongDevice)
	case cs.dev != d:
		return nil, fmt.Errorf("cudagpu: %s: stream of device %d used on device %d: %w", op, cs.dev.ordinal, d.ordinal, gpu.ErrWrongDevice)
	case cs.dead.Load():
		return nil, fmt.Errorf("cudagpu: %s: stream %d: %w", op, cs.id, gpu.ErrDestroyed)
	case cs.tid != 0:
		if err := cs.onThread(op); err != nil {
			return nil, err
		}
	}
	return cs, nil
}

func (d *Device) event(op string, e gpu.Event) (*Event, error) {
	ce, ok := e.(*Event)
	switch {
	case e == nil || (ok && ce == nil):
		return nil, fmt.Errorf("cudagpu: %s: nil event: %w", op, gpu.ErrInvalidHandle)
	case !ok:
		return nil, fmt.Errorf("cudagpu: %s: event %T is not a CUDA event: %w", op, e, gpu.ErrWrongDevice)
	case ce.dev != d:
		return nil, fmt.Errorf("cudagpu: %s: event of device %d used on device %d: %w", op, ce.dev.ordinal, d.ordinal, gpu.ErrWrongDevice)
	case ce.dead.Load():
		return nil, fmt.Errorf("cudagpu: %s: event: %w", op, gpu.ErrDestroyed)
	}
	return ce, nil
}

func (d *Device) pool(op string, p gpu.MemPool) (*MemPool, error) {
	cp, ok := p.(*MemPool)
	switch {
	case p == nil || (ok && cp == nil):
		return nil, fmt.Errorf("cudagpu: %s: nil pool: %w", op, gpu.ErrInvalidHandle)
	case !ok:
		return nil, fmt.Errorf("cudagpu: %s: pool %T is not a CUDA pool: %w", op, p, gpu.ErrWrongDevice)
	case cp.dev != d:
		return nil, fmt.Errorf("cudagpu: %s: pool of device %d used on device %d: %w", op, cp.dev.ordinal, d.ordinal, gpu.ErrWrongDevice)
	case cp.dead.Load():
		return nil, fmt.Errorf("cudagpu: %s: pool: %w", op, gpu.ErrDestroyed)
	}
	return cp, nil
}

func (d *Device) function(op string, f gpu.Function) (*Function, error) {
	cf, ok := f.(*Function)
	switch {
	case f == nil || (ok && cf == nil):
		return nil, fmt.Errorf("cudagpu: %s: nil function: %w", op, gpu.ErrInvalidHandle)
	case !ok:
		return nil, fmt.Errorf("cudagpu: %s: function %T is not a CUDA function: %w", op, f, gpu.ErrWrongDevice)
	case cf.mod.dev != d:
		return nil, fmt.Errorf("cudagpu: %s: function of device %d used on device %d: %w", op, cf.mod.dev.ordinal, d.ordinal, gpu.ErrWrongDevice)
	case cf.mod.dead.Load():
		return nil, fmt.Errorf("cudagpu: %s: %s: module unloaded: %w", op, cf.name, gpu.ErrDestroyed)
	}
	return cf, nil
}

// size checks a byte count from the interface.
func size(op string, n int) error {
	if n < 0 {
		return fmt.Errorf("cudagpu: %s: size %d: %w", op, n, gpu.ErrInvalidValue)
	}
	return nil
}

// allocSize checks the size of an allocation: as with cuMemAlloc, zero is
// as invalid as a negative size.
func allocSize(op string, n int) error {
	if n <= 0 {
		return fmt.Errorf("cudagpu: %s: size %d: %w", op, n, gpu.ErrInvalidValue)
	}
	return nil
}
