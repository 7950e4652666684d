// The kernels that the package's tests and benchmarks launch on an arena.
//
// They are hand-written PTX (sa_arena.ptx, embedded) from sa_arena.cu, so
// the module builds with no CUDA toolkit; the driver compiles them for the
// card when the module loads. The simulator runs Go versions of the same
// entries (simkernels.go), with the same arguments and algorithm, so a
// test means the same thing on both backends.

package devarena

import (
	_ "embed"
	"fmt"
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
)

// PTX is the text of the arena kernels' module.
//
//go:embed sa_arena.ptx
var PTX string

// Entry names in PTX.
const (
	TagEntry  = "sa_arena_tag"
	BumpEntry = "sa_arena_bump"
)

// Launch shape: blockSize threads per block, at most maxBlocks blocks; the
// kernels loop over the rest (grid-stride), so any n fits one launch.
const (
	blockSize = 256
	maxBlocks = 4096
	// MaxSpan bounds Tag's span, so a tag's request stays small.
	MaxSpan = 1 << 16
)

// Kernels are the arena kernels loaded on one device.
type Kernels struct {
	dev       gpu.Device
	tag, bump gpu.Function
}

var loaded sync.Map // gpu.Device -> *Kernels

// LoadKernels loads the module on dev, once per device; later calls return
// the same *Kernels.
func LoadKernels(dev gpu.Device) (*Kernels, error) {
	if dev == nil {
		return nil, fmt.Errorf("devarena: load kernels: nil device: %w", gpu.ErrInvalidHandle)
	}
	if k, ok := loaded.Load(dev); ok {
		return k.(*Kernels), nil
	}
	m, err := dev.LoadModule(PTX)
	if err != nil {
		return nil, fmt.Errorf("devarena: load kernels: %w", err)
	}
	k := &Kernels{dev: dev}
	if k.tag, err = m.Function(TagEntry); err == nil {
		k.bump, err = m.Function(BumpEntry)
	}
	if err != nil {
		m.Unload()
		return nil, fmt.Errorf("devarena: load kernels: %w", err)
	}
	actual, raced := loaded.LoadOrStore(dev, k)
	if raced {
		m.Unload()
	}
	return actual.(*Kernels), nil
}

// TagBytes is the request of Tag's logical thread i: 4*(1 + i%span) bytes.
func TagBytes(i uint64, span int) int {
	return 4 * (1 + int(i%uint64(max(span, 1))))
}

// Tag enqueues on s a kernel in which logical thread i, for i < n, asks
// arena a for TagBytes(i, span) bytes, stores the pointer it got (or 0) in
// the uint64 out[i], and fills every 32-bit word of its allocation with
// uint32(i). out must hold n uint64s. s may be another stream than the
// arena's if an event orders them (see Arena).
func (k *Kernels) Tag(s gpu.Stream, a *Arena, out gpu.DevicePtr, n, span int) error {
	if err := k.check("tag", a, n); err != nil {
		return err
	}
	if span < 1 || span > MaxSpan {
		return fmt.Errorf("devarena: tag: span %d (want 1 to %d): %w", span, MaxSpan, gpu.ErrInvalidValue)
	}
	if out == 0 {
		return fmt.Errorf("devarena: tag: null output: %w", gpu.ErrInvalidValue)
	}
	if n == 0 {
		return nil
	}
	return k.dev.Launch(k.tag, grid(n), gpu.Dim3{X: blockSize}, 0, s, a.Header(), out, uint64(n), uint32(span))
}

// Bump enqueues on s a kernel in which logical thread i, for i < n, asks
// arena a for bytes bytes and, if it got them, writes uint32(i) at the
// start. The benchmark's kernel: one allocation per thread.
func (k *Kernels) Bump(s gpu.Stream, a *Arena, n, bytes int) error {
	if err := k.check("bump", a, n); err != nil {
		return err
	}
	if bytes < 0 {
		return fmt.Errorf("devarena: bump: %d bytes: %w", bytes, gpu.ErrInvalidValue)
	}
	if n == 0 {
		return nil
	}
	return k.dev.Launch(k.bump, grid(n), gpu.Dim3{X: blockSize}, 0, s, a.Header(), uint64(n), uint64(bytes))
}

func (k *Kernels) check(op string, a *Arena, n int) error {
	if a == nil {
		return fmt.Errorf("devarena: %s: nil arena: %w", op, gpu.ErrInvalidHandle)
	}
	if a.Device() != k.dev {
		return fmt.Errorf("devarena: %s: arena of another device: %w", op, gpu.ErrWrongDevice)
	}
	if a.Closed() {
		return fmt.Errorf("devarena: %s: %w", op, ErrClosed)
	}
	if n < 0 {
		return fmt.Errorf("devarena: %s: %d threads: %w", op, n, gpu.ErrInvalidValue)
	}
	return nil
}

func grid(n int) gpu.Dim3 {
	b := (n + blockSize - 1) / blockSize
	return gpu.Dim3{X: min(b, maxBlocks)}
}
