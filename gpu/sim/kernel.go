// Kernels: Go functions standing in for PTX entries.
//
// RegisterKernel maps an entry name to a Go function, process-wide.
// LoadModule parses the PTX text for its .entry directives and their
// parameter types, and resolves each entry to its registered function at
// load time (an entry with none is an error matching gpu.ErrNotFound; text
// without a .version directive is not PTX: gpu.ErrInvalidPTX). Launch
// checks the grid, block and shared memory like the driver, and the
// arguments against the PTX parameters (count and size), which the real
// driver cannot do; then it enqueues the function, which runs on the
// stream's worker and reaches device memory through *Launch. A kernel that
// returns an error or panics fails the stream (a sticky error).

package sim

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
)

// KernelFunc is the Go implementation of a PTX entry. It runs on the
// stream's worker; an error it returns (or a panic) becomes the stream's
// sticky error.
type KernelFunc func(l *Launch) error

var registry sync.Map // entry name -> KernelFunc

// RegisterKernel registers fn as the implementation of the PTX entry
// named entry, for modules loaded afterwards. A later registration of the
// same name replaces the earlier one (so a test may substitute a kernel).
// A nil fn removes the registration.
func RegisterKernel(entry string, fn KernelFunc) {
	if fn == nil {
		registry.Delete(entry)
		return
	}
	registry.Store(entry, fn)
}

type module struct {
	dev      *Device
	mu       sync.Mutex
	unloaded bool
	funcs    map[string]*function
}

type function struct {
	m      *module
	name   string
	fn     KernelFunc
	params []int // byte size of each parameter; nil: unknown, not checked
}

var _ gpu.Module = (*module)(nil)
var _ gpu.Function = (*function)(nil)

func (f *function) Name() string { return f.name }

var (
	ptxComment = regexp.MustCompile(`(?s)//[^\n]*|/\*.*?\*/`)
	ptxEntry   = regexp.MustCompile(`\.entry\s+([A-Za-z_$%][A-Za-z0-9_$%]*)\s*(\(([^)]*)\))?`)
	ptxParam   = regexp.MustCompile(`^\.param\s+(?:\.align\s+\d+\s+)?\.([a-z]+[0-9]+)(?:\s+\.ptr(?:\s+\.[a-z]+)*(?:\s+\.align\s+\d+)?)?\s+[A-Za-z_$%][A-Za-z0-9_$%]*$`)
)

// parsePTX returns the entries of text and their parameter sizes.
func parsePTX(text string) (map[string][]int, error) {
	text = ptxComment.ReplaceAllString(text, "")
	if !strings.Contains(text, ".version") {
		return nil, fmt.Errorf("no .version directive")
	}
	entries := make(map[string][]int)
	for _, m := range ptxEntry.FindAllStringSubmatch(text, -1) {
		name, list := m[1], strings.TrimSpace(m[3])
		var sizes []int
		if list != "" {
			for _, p := range strings.Split(list, ",") {
				pm := ptxParam.FindStringSubmatch(strings.Join(strings.Fields(p), " "))
				if pm == nil {
					sizes = nil // a parameter we do not model: do not check
					break
				}
				sz := paramSize(pm[1])
				if sz == 0 {
					sizes = nil
					break
				}
				sizes = append(sizes, sz)
			}
			if sizes == nil {
				entries[name] = nil
				continue
			}
		} else {
			sizes = []int{}
		}
		entries[name] = sizes
	}
	return entries, nil
}

func paramSize(t string) int {
	switch t {
	case "u32", "s32", "b32", "f32":
		return 4
	case "u64", "s64", "b64", "f64":
		return 8
	}
	return 0
}

// LoadModule loads PTX text: every .entry must have a Go implementation
// registered with RegisterKernel.
func (d *Device) LoadModule(ptx string) (gpu.Module, error) {
	const call = "cuModuleLoadData"
	if err := d.inject(OpModuleLoad); err != nil {
		return nil, err
	}
	entries, err := parsePTX(ptx)
	if err != nil {
		return nil, driverErrf(call, gpu.ErrInvalidPTX, "%v", err)
	}
	m := &module{dev: d, funcs: make(map[string]*function)}
	for name, params := range entries {
		fn, ok := registry.Load(name)
		if !ok {
			return nil, driverErrf(call, gpu.ErrNotFound, "entry %q has no Go implementation (sim.RegisterKernel)", name)
		}
		m.funcs[name] = &function{m: m, name: name, fn: fn.(KernelFunc), params: params}
	}
	return m, nil
}

// Function looks a kernel up by its entry name.
func (m *module) Function(name string) (gpu.Function, error) {
	const call = "cuModuleGetFunction"
	if err := m.live(call); err != nil {
		return nil, err
	}
	if err := m.dev.inject(OpModuleGetFunction); err != nil {
		return nil, err
	}
	f, ok := m.funcs[name]
	if !ok {
		return nil, driverErrf(call, gpu.ErrNotFound, "no entry %q in module", name)
	}
	return f, nil
}

func (m *module) live(call string) error {
	if m == nil {
		return wrap(call, fmt.Errorf("nil module: %w", gpu.ErrInvalidHandle))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unloaded {
		return wrap(call, fmt.Errorf("module: %w", gpu.ErrDestroyed))
	}
	return nil
}

// Unload unloads the module; its functions can no longer be launched.
func (m *module) Unload() error {
	const call = "cuModuleUnload"
	if err := m.live(call); err != nil {
		return err
	}
	if err := m.dev.inject(OpModuleUnload); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unloaded {
		return wrap(call, fmt.Errorf("module: %w", gpu.ErrDestroyed))
	}
	m.unloaded = true
	return nil
}

func dim(d gpu.Dim3) (gpu.Dim3, bool) {
	if d.X < 0 || d.Y < 0 || d.Z < 0 {
		return d, false
	}
	return gpu.Dim3{X: max(d.X, 1), Y: max(d.Y, 1), Z: max(d.Z, 1)}, true
}

func argSize(a any) int {
	switch a.(type) {
	case gpu.DevicePtr, int64, uint64, float64:
		return 8
	case int32, uint32, float32:
		return 4
	}
	return 0
}

// Launch enqueues f on s.
func (d *Device) Launch(gf gpu.Function, grid, block gpu.Dim3, sharedMem int, gs gpu.Stream, args ...any) error {
	const call = "cuLaunchKernel"
	f, ok := gf.(*function)
	if gf == nil || (ok && f == nil) {
		return wrap(call, fmt.Errorf("nil function: %w", gpu.ErrInvalidHandle))
	}
	if !ok {
		return wrap(call, fmt.Errorf("function of another backend (%T): %w", gf, gpu.ErrWrongDevice))
	}
	if f.m.dev != d {
		return wrap(call, fmt.Errorf("function of %v launched on %v: %w", f.m.dev, d, gpu.ErrWrongDevice))
	}
	if err := f.m.live(call); err != nil {
		return err
	}
	s, err := d.stream(call, gs)
	if err != nil {
		return err
	}
	if err := d.inject(OpLaunch); err != nil {
		return err
	}
	g, ok1 := dim(grid)
	b, ok2 := dim(block)
	switch {
	case !ok1 || !ok2:
		return driverErrf(call, gpu.ErrInvalidValue, "negative grid %v or block %v", grid, block)
	case b.X > 1024 || b.Y > 1024 || b.Z > 64 || b.X*b.Y*b.Z > 1024:
		return driverErrf(call, gpu.ErrInvalidValue, "block %v over 1024 threads", block)
	case g.X > 1<<31-1 || g.Y > 65535 || g.Z > 65535:
		return driverErrf(call, gpu.ErrInvalidValue, "grid %v too large", grid)
	case sharedMem < 0 || sharedMem > 48<<10:
		return driverErrf(call, gpu.ErrInvalidValue, "dynamic shared memory %d bytes", sharedMem)
	}
	for i, a := range args {
		if argSize(a) == 0 {
			return driverErrf(call, gpu.ErrInvalidValue, "%s: argument %d has type %T", f.name, i, a)
		}
	}
	if f.params != nil {
		if len(args) != len(f.params) {
			return driverErrf(call, gpu.ErrInvalidValue, "%s takes %d parameters, got %d arguments", f.name, len(f.params), len(args))
		}
		for i, a := range args {
			if argSize(a) != f.params[i] {
				return driverErrf(call, gpu.ErrInvalidValue, "%s: parameter %d is %d bytes, argument is %T", f.name, i, f.params[i], a)
			}
		}
	}
	l := &Launch{Entry: f.name, Grid: g, Block: b, SharedMem: sharedMem, Args: append([]any(nil), args...), dev: d, fn: f.fn}
	if s.cs.capt.Load() != nil {
		return s.captureOp(&op{kind: opLaunch, name: call, launch: l}, nil)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return wrap(call, gpu.ErrDestroyed)
	}
	s.enqueueLocked(&op{kind: opLaunch, name: call, launch: l})
	return nil
}

// runKernel runs a launch on the worker.
func (d *Device) runKernel(o *op) (err error) {
	l := o.launch
	l.stream = o.s.id
	defer func() {
		if r := recover(); r != nil {
			err = driverErrf(o.name, gpu.ErrLaunchFailed, "kernel %s panicked: %v", l.Entry, r)
		}
	}()
	if err := l.fn(l); err != nil {
		var code gpu.Code
		if errors.As(err, &code) {
			return fmt.Errorf("%s: kernel %s: %w", o.name, l.Entry, err)
		}
		return fmt.Errorf("%w: kernel %s: %w", &gpu.Error{Op: o.name, Code: gpu.ErrLaunchFailed}, l.Entry, err)
	}
	return nil
}
