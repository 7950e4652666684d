// Package kernels holds the small kernels that streamalloc's tests,
// benchmarks and examples launch: fill a buffer with a pattern, check the
// pattern, and hold a stream for a while (a "long kernel").
//
// The kernels are PTX text (kernels.ptx, embedded), so the module builds
// with no CUDA toolkit and the driver compiles them for the card at load
// time. The simulator runs Go versions of the same entries (sim.go), so a
// test that launches them means the same thing on both backends.
package kernels

import (
	_ "embed"
	"fmt"
	"sync"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
)

// PTX is the text of the kernels' module.
//
//go:embed kernels.ptx
var PTX string

// Entry names in PTX.
const (
	FillEntry  = "sa_fill_u32"
	CheckEntry = "sa_check_u32"
	SpinEntry  = "sa_spin"
)

// blockSize is the threads per block of Fill and Check; their grids are
// capped at maxBlocks and loop over the rest, so any n fits one launch.
const (
	blockSize = 256
	maxBlocks = 4096
)

// Kernels are the built-in kernels loaded on one device.
type Kernels struct {
	dev               gpu.Device
	fill, check, spin gpu.Function
}

var loaded sync.Map // gpu.Device -> *Kernels

// Load loads the module on dev, once per device; later calls return the
// same *Kernels.
func Load(dev gpu.Device) (*Kernels, error) {
	if dev == nil {
		return nil, fmt.Errorf("kernels: load: nil device: %w", gpu.ErrInvalidHandle)
	}
	if k, ok := loaded.Load(dev); ok {
		return k.(*Kernels), nil
	}
	m, err := dev.LoadModule(PTX)
	if err != nil {
		return nil, fmt.Errorf("kernels: load module: %w", err)
	}
	k := &Kernels{dev: dev}
	for _, e := range []struct {
		name string
		f    *gpu.Function
	}{{FillEntry, &k.fill}, {CheckEntry, &k.check}, {SpinEntry, &k.spin}} {
		if *e.f, err = m.Function(e.name); err != nil {
			m.Unload()
			return nil, fmt.Errorf("kernels: %w", err)
		}
	}
	actual, raced := loaded.LoadOrStore(dev, k)
	if raced {
		m.Unload()
	}
	return actual.(*Kernels), nil
}

// Fill enqueues on s a kernel that writes n uint32 words at p, word i
// being seed + i.
func (k *Kernels) Fill(s gpu.Stream, p gpu.DevicePtr, n int, seed uint32) error {
	if n < 0 {
		return fmt.Errorf("kernels: fill %d words: %w", n, gpu.ErrInvalidValue)
	}
	if n == 0 {
		return nil
	}
	return k.dev.Launch(k.fill, grid(n), gpu.Dim3{X: blockSize}, 0, s, p, uint64(n), seed)
}

// Check enqueues on s a kernel that compares n uint32 words at p with the
// pattern of Fill and atomically adds the number of mismatches to the
// uint32 at errCount.
func (k *Kernels) Check(s gpu.Stream, p gpu.DevicePtr, n int, seed uint32, errCount gpu.DevicePtr) error {
	if n < 0 {
		return fmt.Errorf("kernels: check %d words: %w", n, gpu.ErrInvalidValue)
	}
	if n == 0 {
		return nil
	}
	return k.dev.Launch(k.check, grid(n), gpu.Dim3{X: blockSize}, 0, s, p, uint64(n), seed, errCount)
}

// Spin enqueues on s a one-thread kernel that runs for about d, holding
// the stream the way a long kernel would.
func (k *Kernels) Spin(s gpu.Stream, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("kernels: spin %v: %w", d, gpu.ErrInvalidValue)
	}
	return k.dev.Launch(k.spin, gpu.Dim3{X: 1}, gpu.Dim3{X: 1}, 0, s, uint64(d.Nanoseconds()))
}

func grid(n int) gpu.Dim3 {
	b := (n + blockSize - 1) / blockSize
	return gpu.Dim3{X: min(b, maxBlocks)}
}
