// The suballocators' side of the capture wing (capture.go): how each one
// describes itself to its GraphPool, and how each confirms that a pointer
// freed inside a capture is a live allocation of its own before the free
// is kept for Release.

package mr

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

// captureOrderable refuses to order waiter after signaler with an event
// when they are not in the same capture (or both outside any): a wait of
// a capturing stream on outside work fails and invalidates its capture,
// and a wait of an outside stream on captured work joins it to the
// capture.
func captureOrderable(waiter, signaler gpu.Stream) error {
	w, s := gpu.CaptureID(waiter), gpu.CaptureID(signaler)
	if w == s {
		return nil
	}
	return fmt.Errorf("order stream %d (capture %d) after stream %d (capture %d): %w",
		waiter.ID(), w, signaler.ID(), s, ErrStreamCapturing)
}

// synchronizeDevice is Device.Synchronize for the fallbacks that need it
// (the last work of a destroyed stream), refused with ErrStreamCapturing
// while a capture of the device runs: the driver refuses it in every mode
// and invalidates the capture.
func synchronizeDevice(dev gpu.Device) error {
	if gpu.DeviceCapturing(dev) {
		return fmt.Errorf("synchronize device %d: %w", dev.Ordinal(), ErrStreamCapturing)
	}
	return dev.Synchronize()
}

func (p *Pool) captureClient() captureClient {
	return captureClient{name: "pool", res: p, up: p.upstream}
}

// ownerClient is the pool's capture client for a request of owner.
func (p *Pool) ownerClient(owner uint32) captureClient {
	cl := p.captureClient()
	cl.owner = owner
	return cl
}

// knowsFor returns knows for the pointers of owner.
func (p *Pool) knowsFor(owner uint32) func(gpu.DevicePtr, int) error {
	if owner == 0 {
		return p.knows
	}
	return func(ptr gpu.DevicePtr, size int) error { return p.knowsOwned(ptr, size, owner) }
}

// knows reports whether ptr is a live block of size bytes of the pool
// that Allocate handed out.
func (p *Pool) knows(ptr gpu.DevicePtr, size int) error { return p.knowsOwned(ptr, size, 0) }

// knowsOwned reports whether ptr is a live block of size bytes of the pool
// that owner holds.
func (p *Pool) knowsOwned(ptr gpu.DevicePtr, size int, owner uint32) error {
	c, _, ok := p.chunks.find(ptr)
	if !ok {
		return ErrUnknownPointer
	}
	for {
		h := c.home.Load()
		if h == nil {
			return ErrUnknownPointer
		}
		h.lock()
		if c.home.Load() != h {
			h.mu.Unlock()
			continue
		}
		defer h.mu.Unlock()
		b := h.live.get(ptr)
		switch {
		case b == nil:
			return h.diagnose(c, ptr)
		case b.owner != owner:
			return ErrUnknownPointer
		case b.req != size:
			return poolSizeMismatch(ptr, b.req, size)
		}
		return nil
	}
}

func (r *Arena) captureClient() captureClient {
	return captureClient{name: "arena", res: r, up: r.up}
}

// knows reports whether p is a live allocation of size bytes of the arena.
func (r *Arena) knows(p gpu.DevicePtr, size int) error {
	sb, base, ok := r.index.find(p)
	if !ok {
		e, live := r.large.lookup(p)
		switch {
		case !live:
			return ErrUnknownPointer
		case e.size != size:
			return fmt.Errorf("pointer %#x of %d bytes freed as %d: %w", uint64(p), e.size, size, ErrSizeMismatch)
		}
		return nil
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.check(p, int(p-base), size)
}

func (r *FixedSize) captureClient() captureClient {
	return captureClient{name: r.name, res: r, up: r.up, block: r.blockSize}
}

// knows reports whether p is a live block of the resource allocated for
// size bytes.
func (r *FixedSize) knows(p gpu.DevicePtr, size int) error {
	b, err := r.block(p)
	if err != nil {
		return err
	}
	switch cur := b.c.state[b.i].Load(); {
	case cur == 0:
		return ErrUnknownPointer
	case cur == freedState:
		return ErrDoubleFree
	case cur != int64(size):
		return fmt.Errorf("pointer %#x of %d bytes freed as %d: %w", uint64(p), cur, size, ErrSizeMismatch)
	}
	return nil
}
