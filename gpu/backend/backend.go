// Package backend chooses a gpu.Backend by name: the real driver, the
// simulator, or whichever this machine can run.
//
// "auto" is the real driver when one loads and sees at least one device,
// and the simulator otherwise, so that a program (or a test) runs the same
// everywhere and uses the GPU when there is one. The simulator it returns
// is a new one each time, with the default configuration; the CUDA
// backend is the process's single one.
package backend

import (
	"errors"
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/cudagpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// Kinds are the names Open accepts.
var Kinds = []string{"auto", "cuda", "sim"}

// ErrUnknownKind is returned for a kind Open does not know.
var ErrUnknownKind = errors.New("backend: unknown kind")

// Open returns the backend of the given kind: "cuda" (an error matching
// gpu.ErrNoDriver or gpu.ErrNoDevice when the driver cannot be used),
// "sim" (a new simulator with sim.Config{}), or "auto" (cuda if usable,
// else sim). Any other kind returns an error matching ErrUnknownKind.
func Open(kind string) (gpu.Backend, error) {
	switch kind {
	case "sim":
		return sim.New(sim.Config{}), nil
	case "cuda":
		b, err := openCUDA()
		if err != nil {
			return nil, fmt.Errorf("backend: cuda: %w", err)
		}
		return b, nil
	case "auto":
		if b, err := openCUDA(); err == nil {
			return b, nil
		}
		return sim.New(sim.Config{}), nil
	}
	return nil, fmt.Errorf("%w %q (want one of %q)", ErrUnknownKind, kind, Kinds)
}

// openCUDA opens the driver and requires a device.
func openCUDA() (gpu.Backend, error) {
	b, err := cudagpu.Open()
	if err != nil {
		return nil, err
	}
	n, err := b.DeviceCount()
	if err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("no CUDA device: %w", gpu.ErrNoDevice)
	}
	return b, nil
}
