// Whether this process may make fabric memory: a device may offer fabric
// handles (CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES with
// CU_MEM_HANDLE_TYPE_FABRIC, attribute 128 saying 1) to a process the
// driver then refuses them, because it has no IMEX channel
// (/dev/nvidia-caps-imex-channels); the attributes do not tell. Driver 580
// on the H100 lets such a process create a pool exportable as fabric,
// refuses the pool's export (CUDA_ERROR_NOT_PERMITTED), and ends the
// process (SIGSEGV) in the cuMemPoolDestroy of that pool
// (docs/bench/h100-2026-11-25-fabric). So NewExportableMemPool never makes
// a pool requesting fabric handles before the driver has said the process
// may make fabric memory.
//
// The question is cuMemCreate of one granule of pinned device memory
// requesting fabric handles, released at once; the granule's size is the
// granularity of memory with those properties, and the driver's refusal
// to give it is read as cuMemCreate's would be. Its answers:
//
//   - CUDA_SUCCESS: the process may make fabric memory (an IMEX channel);
//     the granule is released, and a release that fails is returned and
//     nothing is remembered (the question is asked again).
//   - CUDA_ERROR_NOT_PERMITTED: no IMEX channel; remembered, and every
//     fabric pool of the device is refused with it (gpu.ErrNotPermitted).
//   - CUDA_ERROR_NOT_SUPPORTED, or CUDA_ERROR_INVALID_VALUE (a driver that
//     refuses the fabric handle type in an allocation's properties): the
//     driver makes no fabric memory on this device, whatever its pool
//     attribute says; remembered, and fabric pools are refused with
//     gpu.ErrNotSupported, as a handle type the device does not offer. A
//     pool of fabric memory is the same memory, so such a pool could not
//     be exported either.
//   - anything else (CUDA_ERROR_OUT_OF_MEMORY on a full device, a context
//     in error): says nothing about fabric; returned, not remembered, and
//     no pool is made, since one made without the answer could be the
//     pool whose destruction crashes.
//
// Invariant: fabricAsk.known is set, under fabricAsk.mu, only together
// with the definite answer in fabricAsk.err; after that the device does
// not ask again.

package cudagpu

import (
	"errors"
	"fmt"
	"sync"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
)

// fabricAsk is the device's remembered answer to whether the process may
// make fabric memory.
type fabricAsk struct {
	mu    sync.Mutex
	known bool
	err   error // nil: permitted
}

// fabricPermitted reports whether this process may make memory exportable
// as fabric handles on d: nil if it may, else the driver's refusal
// (matching gpu.ErrNotPermitted without an IMEX channel) or the error that
// kept the question from being answered. The definite answers are asked
// once per device.
func (d *Device) fabricPermitted() error {
	d.fabric.mu.Lock()
	defer d.fabric.mu.Unlock()
	if d.fabric.known {
		return d.fabric.err
	}
	definite, err := d.askFabric()
	if definite {
		d.fabric.known, d.fabric.err = true, err
	}
	return err
}

// askFabric makes and releases one granule requesting fabric handles.
// definite says whether err is the driver's word on fabric memory (nil:
// permitted; or refused for good) rather than a failure of the question.
func (d *Device) askFabric() (definite bool, err error) {
	fabric := cuda.HandleType(gpu.HandleFabric)
	g, err := d.ctx.MemAllocationGranularityExportable(d.dev, cuda.GranularityMinimum, fabric)
	if err != nil {
		return d.fabricRefusal("granularity", err)
	}
	h, err := d.ctx.MemCreateExportable(d.dev, g, fabric)
	if err != nil {
		return d.fabricRefusal("a granule", err)
	}
	if err := d.ctx.MemRelease(h); err != nil {
		return false, fmt.Errorf("fabric memory: releasing the granule asked with: %w", err)
	}
	return true, nil
}

// fabricRefusal reads the driver's refusal of what askFabric asked (the
// granularity of fabric memory, or a granule of it): definite for the
// answers the file comment lists, else a failure of the question.
func (d *Device) fabricRefusal(what string, err error) (definite bool, _ error) {
	switch {
	case errors.Is(err, gpu.ErrNotPermitted):
		return true, fmt.Errorf("fabric memory: %s: no IMEX channel in this process: %w", what, err)
	case errors.Is(err, gpu.ErrNotSupported), errors.Is(err, gpu.ErrInvalidValue):
		return true, fmt.Errorf("fabric memory: %s: the driver makes none on device %d (%v): %w", what, d.ordinal, err, gpu.ErrNotSupported)
	}
	return false, fmt.Errorf("fabric memory: %s: asking the driver: %w", what, err)
}
