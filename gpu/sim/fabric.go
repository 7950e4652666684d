// Fabric handles without an IMEX channel: a card may offer fabric handles
// (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED says 1) while the
// process may not use them, because the driver asks for an IMEX channel
// (a character device under /dev/nvidia-caps-imex-channels, made by the
// administrator or the IMEX service) before it makes or opens anything
// shared across a fabric. Config.NoIMEXChannel answers as such a card
// does: the driver's CUDA_ERROR_NOT_PERMITTED for a physical allocation
// that requests fabric handles (cuMemCreate), a pool's fabric export
// (cuMemPoolExportToShareableHandle) and the import of a fabric handle,
// while the attributes and the creation of a pool exportable as fabric
// succeed. Each refusal comes after the call's own argument checks and
// changes nothing.

package sim

import "github.com/streamalloc/streamalloc/gpu"

// fabricRefused returns the driver's refusal of call, which uses fabric
// handles t, on a device without an IMEX channel; nil where it is allowed.
func (d *Device) fabricRefused(call string, t gpu.HandleType) error {
	if !d.b.cfg.NoIMEXChannel || t&gpu.HandleFabric == 0 {
		return nil
	}
	return driverErrf(call, gpu.ErrNotPermitted, "fabric handles on %v, which has no IMEX channel", d)
}
