// Go versions of the arena kernels, for the simulator (package gpu/sim).
//
// They do what the PTX entries of sa_arena.ptx do, with the same
// parameters and the same allocation algorithm (allocate, alloc.go), so a
// test that launches them means the same thing on both backends. The
// logical threads of a launch are spread over a few goroutines, in blocks
// of blockSize, so that their atomic adds really race on the counter.
// Atomics go through the simulator's relaxed atomics (Launch.LoadUint64,
// AddUint64, StoreUint32), which, like the card's, create no
// happens-before edges: they never hide a missing event between two
// streams from the race detector (Go's own sync/atomic would). Every
// access to device memory is bounds-checked by the simulator, so a wrong
// pointer is a failed launch (an illegal address), never a wild write.

package devarena

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

func init() {
	sim.RegisterKernel(TagEntry, simTag)
	sim.RegisterKernel(BumpEntry, simBump)
}

// maxSimThreads bounds a simulated launch: the card would run any n, the
// simulator would take hours.
const maxSimThreads = 1 << 32

// simWorkers is how many goroutines run one launch's threads.
const simWorkers = 4

// launchCell is a header's epoch state in simulated device memory.
type launchCell struct {
	l   *sim.Launch
	hdr gpu.DevicePtr
}

func (c launchCell) loadOffset() (uint64, error) {
	return c.l.LoadUint64(c.hdr + OffOffset)
}

func (c launchCell) addOffset(n uint64) (uint64, error) {
	v, err := c.l.AddUint64(c.hdr+OffOffset, n)
	return v - n, err
}

// setOverflow sets the flag: a store, as in the PTX (every failing thread
// stores the same 1).
func (c launchCell) setOverflow() error {
	return c.l.StoreUint32(c.hdr+OffOverflow, 1)
}

// launchHeader reads the header argument of a launch.
func launchHeader(l *sim.Launch) (launchCell, fixed, error) {
	hdr, err := l.ArgPtr(0)
	if err != nil {
		return launchCell{}, fixed{}, err
	}
	if hdr%8 != 0 { // the card faults on the first 64-bit load
		return launchCell{}, fixed{}, fmt.Errorf("%s: header at %#x: %w", l.Entry, uint64(hdr), gpu.ErrMisalignedAddress)
	}
	b, err := l.Bytes(hdr, HeaderSize)
	if err != nil {
		return launchCell{}, fixed{}, fmt.Errorf("%s: header: %w", l.Entry, err)
	}
	f, err := fixedOf(b)
	if err != nil {
		return launchCell{}, fixed{}, fmt.Errorf("%s: %w", l.Entry, err)
	}
	return launchCell{l: l, hdr: hdr}, f, nil
}

// threads runs fn for every logical thread i < n, blocks of blockSize
// threads spread over simWorkers goroutines, and returns the first error.
func threads(n uint64, fn func(i uint64) error) error {
	if n > maxSimThreads {
		return fmt.Errorf("devarena: %d threads in one simulated launch: %w", n, gpu.ErrInvalidValue)
	}
	blocks := (n + blockSize - 1) / blockSize
	workers := min(uint64(simWorkers), uint64(runtime.GOMAXPROCS(0)), blocks)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for b := w; b < blocks; b += workers {
				for i := b * blockSize; i < min(n, (b+1)*blockSize); i++ {
					if err := fn(i); err != nil {
						errs[w] = err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// simTag is sa_arena_tag(arena, out, n, span).
func simTag(l *sim.Launch) error {
	c, f, err := launchHeader(l)
	if err != nil {
		return err
	}
	out, err := l.ArgPtr(1)
	if err != nil {
		return err
	}
	n, err := l.ArgUint64(2)
	if err != nil {
		return err
	}
	span, err := l.ArgUint32(3)
	if err != nil {
		return err
	}
	span = max(span, 1)
	return threads(n, func(i uint64) error {
		bytes := 4 * (1 + i%uint64(span))
		p, err := allocate(c, f, bytes)
		if err != nil {
			return err
		}
		var slot [8]byte
		binary.LittleEndian.PutUint64(slot[:], p)
		if err := store(l, out+gpu.DevicePtr(8*i), slot[:]); err != nil {
			return err
		}
		if p == 0 {
			return nil
		}
		return l.Chunks(gpu.DevicePtr(p), int(bytes), func(_ int, b []byte) error {
			fillTag(b, uint32(i))
			l.ReportWrite(b)
			return nil
		})
	})
}

// simBump is sa_arena_bump(arena, n, bytes).
func simBump(l *sim.Launch) error {
	c, f, err := launchHeader(l)
	if err != nil {
		return err
	}
	n, err := l.ArgUint64(1)
	if err != nil {
		return err
	}
	bytes, err := l.ArgUint64(2)
	if err != nil {
		return err
	}
	return threads(n, func(i uint64) error {
		p, err := allocate(c, f, bytes)
		if err != nil || p == 0 {
			return err
		}
		var word [4]byte
		binary.LittleEndian.PutUint32(word[:], uint32(i))
		return store(l, gpu.DevicePtr(p), word[:])
	})
}

// store writes src to device memory at p.
func store(l *sim.Launch, p gpu.DevicePtr, src []byte) error {
	return l.Chunks(p, len(src), func(off int, b []byte) error {
		copy(b, src[off:])
		return nil
	})
}

// fillTag sets every 32-bit word of b to v. It is not instrumented (the
// caller reports the range in one call), which keeps -race runs fast.
//
//go:norace
func fillTag(b []byte, v uint32) {
	for i := 0; i+4 <= len(b); i += 4 {
		binary.LittleEndian.PutUint32(b[i:], v)
	}
}
