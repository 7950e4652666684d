// Modules, functions and launches.
//
// Launch marshals its arguments into a cuda.Params block on the Go
// stack; package cuda copies it into C memory for the call, so the driver
// never holds a Go pointer. Only fixed-width types are accepted, since a
// kernel parameter has a fixed width: gpu.DevicePtr, int32, uint32, int64,
// uint64, float32 and float64. Anything else is ErrInvalidValue.

package cudagpu

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
)

// Module is the CUDA implementation of gpu.Module.
type Module struct {
	dev  *Device
	h    cuda.Module
	dead atomic.Bool
}

// Function is the CUDA implementation of gpu.Function.
type Function struct {
	mod    *Module
	h      cuda.Function
	name   string
	params []int // parameter sizes in bytes; nil if the driver cannot say
}

// LoadModule is cuModuleLoadData on PTX text.
func (d *Device) LoadModule(ptx string) (gpu.Module, error) {
	h, err := d.ctx.ModuleLoadData(ptx)
	if err != nil {
		return nil, err
	}
	return &Module{dev: d, h: h}, nil
}

// Function is cuModuleGetFunction; an unknown name is ErrNotFound.
func (m *Module) Function(name string) (gpu.Function, error) {
	if m == nil {
		return nil, fmt.Errorf("cudagpu: Module.Function: nil module: %w", gpu.ErrInvalidHandle)
	}
	if m.dead.Load() {
		return nil, fmt.Errorf("cudagpu: Module.Function(%q): %w", name, gpu.ErrDestroyed)
	}
	h, err := m.dev.ctx.ModuleGetFunction(m.h, name)
	if err != nil {
		return nil, fmt.Errorf("cudagpu: function %q: %w", name, err)
	}
	params, err := m.dev.ctx.FuncParamSizes(h)
	if err != nil && !errors.Is(err, cuda.ErrNotSupported) {
		return nil, fmt.Errorf("cudagpu: function %q: %w", name, err)
	}
	if params == nil && err == nil {
		params = []int{}
	}
	return &Function{mod: m, h: h, name: name, params: params}, nil
}

// Unload is cuModuleUnload; the module's functions can no longer be
// launched. A second Unload returns ErrDestroyed.
func (m *Module) Unload() error {
	if m == nil {
		return fmt.Errorf("cudagpu: Module.Unload: nil module: %w", gpu.ErrInvalidHandle)
	}
	if !m.dead.CompareAndSwap(false, true) {
		return fmt.Errorf("cudagpu: Module.Unload: %w", gpu.ErrDestroyed)
	}
	return m.dev.ctx.ModuleUnload(m.h)
}

// Name is the kernel's entry name.
func (f *Function) Name() string { return f.name }

// Launch is cuLaunchKernel.
func (d *Device) Launch(f gpu.Function, grid, block gpu.Dim3, sharedMem int, s gpu.Stream, args ...any) error {
	cs, err := d.stream("Launch", s)
	if err != nil {
		return err
	}
	cf, err := d.function("Launch", f)
	if err != nil {
		return err
	}
	g, err := dims("grid", grid)
	if err != nil {
		return err
	}
	b, err := dims("block", block)
	if err != nil {
		return err
	}
	if sharedMem < 0 || sharedMem > math.MaxUint32 {
		return fmt.Errorf("cudagpu: Launch %s: shared memory %d: %w", cf.name, sharedMem, gpu.ErrInvalidValue)
	}
	if len(args) > cuda.MaxParams {
		return fmt.Errorf("cudagpu: Launch %s: %d arguments, at most %d: %w", cf.name, len(args), cuda.MaxParams, gpu.ErrInvalidValue)
	}
	if cf.params != nil && len(args) != len(cf.params) {
		return fmt.Errorf("cudagpu: Launch %s: %d arguments for %d parameters: %w", cf.name, len(args), len(cf.params), gpu.ErrInvalidValue)
	}
	var p cuda.Params
	for i, a := range args {
		width := 8
		switch v := a.(type) {
		case gpu.DevicePtr:
			p.Ptr(cuda.DevicePtr(v))
		case int32:
			p.I32(v)
			width = 4
		case uint32:
			p.U32(v)
			width = 4
		case int64:
			p.I64(v)
		case uint64:
			p.U64(v)
		case float32:
			p.F32(v)
			width = 4
		case float64:
			p.F64(v)
		default:
			return fmt.Errorf("cudagpu: Launch %s: argument %d has type %T, want DevicePtr, int32, uint32, int64, uint64, float32 or float64: %w",
				cf.name, i, a, gpu.ErrInvalidValue)
		}
		if cf.params != nil && cf.params[i] != width {
			return fmt.Errorf("cudagpu: Launch %s: argument %d is %T (%d bytes), the parameter %d bytes: %w",
				cf.name, i, a, width, cf.params[i], gpu.ErrInvalidValue)
		}
	}
	if err := d.ctx.LaunchKernel(cf.h, g, b, uint32(sharedMem), cs.h, &p); err != nil {
		return fmt.Errorf("cudagpu: Launch %s: %w", cf.name, err)
	}
	return nil
}

// dims converts a Dim3, zero components counting as 1.
func dims(what string, d gpu.Dim3) ([3]uint32, error) {
	var out [3]uint32
	for i, v := range [3]int{d.X, d.Y, d.Z} {
		if v < 0 || v > math.MaxUint32 {
			return out, fmt.Errorf("cudagpu: Launch: %s %+v: %w", what, d, gpu.ErrInvalidValue)
		}
		out[i] = uint32(max(v, 1))
	}
	return out, nil
}
