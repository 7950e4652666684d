// Go versions of the built-in kernels, for the simulator (package
// gpu/sim). They do what the PTX entries of kernels.ptx do, with the same
// parameters, so a test that launches them means the same thing on both
// backends. The word loops are //go:norace and report their ranges to the
// race detector in one call, which keeps -race runs fast while still
// checking every byte.

package kernels

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

func init() {
	sim.RegisterKernel(FillEntry, simFill)
	sim.RegisterKernel(CheckEntry, simCheck)
	sim.RegisterKernel(SpinEntry, simSpin)
}

// words reads the (ptr, n) arguments of fill and check.
func words(l *sim.Launch) (gpu.DevicePtr, int, uint32, error) {
	p, err := l.ArgPtr(0)
	if err != nil {
		return 0, 0, 0, err
	}
	n, err := l.ArgUint64(1)
	if err != nil {
		return 0, 0, 0, err
	}
	seed, err := l.ArgUint32(2)
	if err != nil {
		return 0, 0, 0, err
	}
	if n > 1<<60 {
		return 0, 0, 0, fmt.Errorf("%s: %d words: %w", l.Entry, n, gpu.ErrInvalidValue)
	}
	if p%4 != 0 {
		return 0, 0, 0, fmt.Errorf("%s: word pointer %#x: %w", l.Entry, uint64(p), gpu.ErrMisalignedAddress)
	}
	return p, int(n), seed, nil
}

// simFill is sa_fill_u32(ptr, n, seed): word i = seed + i.
func simFill(l *sim.Launch) error {
	p, n, seed, err := words(l)
	if err != nil {
		return err
	}
	return l.Chunks(p, 4*n, func(off int, b []byte) error {
		fillWords(b, seed+uint32(off/4))
		l.ReportWrite(b)
		return nil
	})
}

//go:norace
func fillWords(b []byte, v uint32) {
	for i := 0; i+4 <= len(b); i += 4 {
		binary.LittleEndian.PutUint32(b[i:], v)
		v++
	}
}

// simCheck is sa_check_u32(ptr, n, seed, errcount): *errcount += number of
// words != seed + i, added atomically (only when there are mismatches, as
// the PTX kernel touches errcount only on a mismatch).
func simCheck(l *sim.Launch) error {
	p, n, seed, err := words(l)
	if err != nil {
		return err
	}
	errCount, err := l.ArgPtr(3)
	if err != nil {
		return err
	}
	var bad uint32
	err = l.Chunks(p, 4*n, func(off int, b []byte) error {
		l.ReportRead(b)
		bad += countMismatches(b, seed+uint32(off/4))
		return nil
	})
	if err != nil || bad == 0 {
		return err
	}
	_, err = l.AddUint32(errCount, bad)
	return err
}

//go:norace
func countMismatches(b []byte, v uint32) uint32 {
	var bad uint32
	for i := 0; i+4 <= len(b); i += 4 {
		if binary.LittleEndian.Uint32(b[i:]) != v {
			bad++
		}
		v++
	}
	return bad
}

// simSpin is sa_spin(ns): it holds the stream for about ns nanoseconds.
func simSpin(l *sim.Launch) error {
	ns, err := l.ArgUint64(0)
	if err != nil {
		return err
	}
	time.Sleep(time.Duration(min(ns, 1<<62)))
	return nil
}
