// Fabric handles without an IMEX channel: a card may offer fabric handles
// (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED says 1) while the
// process may not use them, because the driver asks for an IMEX channel
// (a character device under /dev/nvidia-caps-imex-channels, made by the
// administrator or the IMEX service) before it makes or opens anything
// shared across a fabric. Config.NoIMEXChannel answers as the H100 with
// driver 580 does on a machine without one (docs/bench/h100-2026-11-25-fabric),
// and as the CUDA backend answers above that driver:
//
//   - gpu.ErrNotPermitted (CUDA_ERROR_NOT_PERMITTED) for a physical
//     allocation that requests fabric handles (cuMemCreate), while the
//     attributes say fabric is offered;
//   - gpu.ErrNotPermitted for a pool requesting fabric handles
//     (NewExportableMemPool), with nothing made. The driver itself makes
//     that pool, refuses its export, and ends the process in
//     cuMemPoolDestroy; the CUDA backend asks the driver with a fabric
//     cuMemCreate first and refuses the pool (gpu/cudagpu/fabric.go), so
//     neither backend ever holds a fabric pool in such a process, and a
//     fabric pool's export without a channel cannot be reached;
//   - gpu.ErrNotSupported (CUDA_ERROR_NOT_SUPPORTED) for the import of a
//     fabric handle (cuMemImportFromShareableHandle of a handle of no
//     export; the pool import, cuMemPoolImportFromShareableHandle, was
//     not measured and answers the same here).
//
// Each refusal comes after the call's own argument checks and changes
// nothing.

package sim

import "github.com/streamalloc/streamalloc/gpu"

// fabricRefused returns the refusal of call, which makes memory or a pool
// requesting handle types t, on a device without an IMEX channel, where t
// has fabric handles; nil where it is allowed.
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
