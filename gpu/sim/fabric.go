// Fabric handles without an IMEX channel: a card may offer fabric handles
// (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED says 1) while the
// process may not use them, because the driver asks for an IMEX channel
// (a character device under /dev/nvidia-caps-imex-channels, made by the
// administrator or the IMEX service) before it makes or opens anything
// shared across a fabric. Config.NoIMEXChannel answers as the H100 with
// driver 580 does on a machine without one (docs/bench/h100-2026-11-25-fabric):
//
//   - CUDA_ERROR_NOT_PERMITTED for a physical allocation that requests
//     fabric handles (cuMemCreate) and for a pool's fabric export
//     (cuMemPoolExportToShareableHandle), while the attributes and the
//     creation of a pool exportable as fabric succeed;
//   - CUDA_ERROR_NOT_SUPPORTED for the import of a fabric handle
//     (cuMemImportFromShareableHandle of a handle of no export; the pool
//     import, cuMemPoolImportFromShareableHandle, was not measured and
//     answers the same here);
//   - the card ends the process (SIGSEGV in cuMemPoolDestroy) when the
//     pool exportable as fabric whose export it refused is destroyed;
//     the simulator destroys it and returns ErrWouldCrash, for every
//     pool exportable as fabric (a destruction with no export tried was
//     not measured), so that a test reaching it fails.
//
// Each refusal comes after the call's own argument checks and changes
// nothing.

package sim

import (
	"errors"
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

// ErrWouldCrash: the driver ends the process in this call, where the
// simulator returns this error instead (Config.NoIMEXChannel).
var ErrWouldCrash = errors.New("sim: the driver ends the process here")

// fabricRefused returns the driver's refusal of call, which makes or
// exports memory as fabric handles t, on a device without an IMEX
// channel; nil where it is allowed.
func (d *Device) fabricRefused(call string, t gpu.HandleType) error {
	if !d.b.cfg.NoIMEXChannel || t&gpu.HandleFabric == 0 {
		return nil
	}
	return driverErrf(call, gpu.ErrNotPermitted, "fabric handles on %v, which has no IMEX channel", d)
}

// fabricImportRefused is fabricRefused of a fabric import.
func (d *Device) fabricImportRefused(call string) error {
	if !d.b.cfg.NoIMEXChannel {
		return nil
	}
	return driverErrf(call, gpu.ErrNotSupported, "a fabric import on %v, which has no IMEX channel", d)
}

// fabricPoolCrash is what destroying p answers on a device without an
// IMEX channel: ErrWouldCrash for a pool exportable as fabric.
func (p *memPool) fabricPoolCrash() error {
	if !p.dev.b.cfg.NoIMEXChannel || p.handles&gpu.HandleFabric == 0 {
		return nil
	}
	return fmt.Errorf("cuMemPoolDestroy of a pool exportable as fabric on %v, which has no IMEX channel: %w", p.dev, ErrWouldCrash)
}
