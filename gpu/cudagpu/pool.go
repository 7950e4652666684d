// Driver memory pools.
//
// The device's default pool is wrapped once, when the device is opened,
// and cannot be destroyed. Attribute numbers are checked here, and so are
// the values the driver would refuse anyway (a reuse policy other than 0
// or 1, a high-water mark set to anything but 0, a current value set at
// all), so that both backends answer the same ErrInvalidValue.

package cudagpu

import (
	"fmt"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
)

// MemPool is the CUDA implementation of gpu.MemPool.
type MemPool struct {
	dev       *Device
	h         cuda.MemPool
	isDefault bool
	dead      atomic.Bool
	borrowed  bool           // adopted, not ours to destroy (foreign.go)
	host      bool           // located on the host (managed.go)
	handles   gpu.HandleType // the handle types it can be exported as (ipc.go)
	imported  bool           // imported from another process (ipc.go)
}

// Handle is the driver's CUmemoryPool.
func (p *MemPool) Handle() cuda.MemPool { return p.h }

// Device is the pool's device; nil for a nil *MemPool, which every
// resource then refuses as a nil pool (gpu.ErrInvalidHandle).
func (p *MemPool) Device() gpu.Device {
	if p == nil {
		return nil
	}
	return p.dev
}

func (p *MemPool) live(op string) error {
	if p == nil {
		return fmt.Errorf("cudagpu: %s: nil pool: %w", op, gpu.ErrInvalidHandle)
	}
	if p.dead.Load() {
		return fmt.Errorf("cudagpu: %s: pool: %w", op, gpu.ErrDestroyed)
	}
	return nil
}

func checkAttr(op string, a gpu.PoolAttr) error {
	if a < gpu.PoolReuseFollowEventDependencies || a > gpu.PoolUsedMemHigh {
		return fmt.Errorf("cudagpu: %s: pool attribute %d: %w", op, a, gpu.ErrInvalidValue)
	}
	return nil
}

// Attribute is cuMemPoolGetAttribute.
func (p *MemPool) Attribute(a gpu.PoolAttr) (uint64, error) {
	if err := p.live("MemPool.Attribute"); err != nil {
		return 0, err
	}
	if err := checkAttr("MemPool.Attribute", a); err != nil {
		return 0, err
	}
	return p.dev.ctx.MemPoolAttribute(p.h, cuda.PoolAttribute(a))
}

// SetAttribute is cuMemPoolSetAttribute.
func (p *MemPool) SetAttribute(a gpu.PoolAttr, v uint64) error {
	const op = "MemPool.SetAttribute"
	if err := p.live(op); err != nil {
		return err
	}
	if err := checkAttr(op, a); err != nil {
		return err
	}
	switch a {
	case gpu.PoolReuseFollowEventDependencies, gpu.PoolReuseAllowOpportunistic, gpu.PoolReuseAllowInternalDependencies:
		if v > 1 {
			return fmt.Errorf("cudagpu: %s: reuse policy %d = %d, want 0 or 1: %w", op, a, v, gpu.ErrInvalidValue)
		}
	case gpu.PoolReservedMemCurrent, gpu.PoolUsedMemCurrent:
		return fmt.Errorf("cudagpu: %s: attribute %d is read-only: %w", op, a, gpu.ErrInvalidValue)
	case gpu.PoolReservedMemHigh, gpu.PoolUsedMemHigh:
		if v != 0 {
			return fmt.Errorf("cudagpu: %s: high-water mark %d can only be reset to 0, not %d: %w", op, a, v, gpu.ErrInvalidValue)
		}
	}
	return p.dev.ctx.MemPoolSetAttribute(p.h, cuda.PoolAttribute(a), v)
}

// TrimTo is cuMemPoolTrimTo.
func (p *MemPool) TrimTo(minBytesToKeep uint64) error {
	if err := p.live("MemPool.TrimTo"); err != nil {
		return err
	}
	return p.dev.ctx.MemPoolTrimTo(p.h, minBytesToKeep)
}

// Destroy is cuMemPoolDestroy for pools made by NewMemPool; the default
// pool returns ErrInvalidValue, a second Destroy ErrDestroyed. On an
// adopted pool it only forgets the wrapper (foreign.go).
func (p *MemPool) Destroy() error {
	if p == nil {
		return fmt.Errorf("cudagpu: MemPool.Destroy: nil pool: %w", gpu.ErrInvalidHandle)
	}
	if p.isDefault {
		return fmt.Errorf("cudagpu: MemPool.Destroy: the default pool: %w", gpu.ErrInvalidValue)
	}
	if !p.dead.CompareAndSwap(false, true) {
		return fmt.Errorf("cudagpu: MemPool.Destroy: %w", gpu.ErrDestroyed)
	}
	p.dev.foreign.dropPool(p)
	if p.borrowed {
		return nil
	}
	return p.dev.ctx.MemPoolDestroy(p.h)
}
