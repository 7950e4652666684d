// Host-to-device copies from page-locked memory read their source when
// they run, as the driver's do.
//
// A copy from pageable memory is staged by the driver before
// cuMemcpyHtoDAsync returns, so the caller may reuse the source at once;
// the simulator models that by copying the source at enqueue time. A copy
// from page-locked memory (MallocHost) is a DMA that reads the source when
// the stream reaches it: the caller must not write the source until the
// copy has completed. The simulator keeps the caller's slice for such a
// copy and reads it on the stream's worker, so under -race a host write
// that is not ordered after the copy (by a stream or event synchronization,
// or a completed query) is reported on the bytes.

package sim

// htodSource is the bytes a host-to-device copy of src reads when it runs:
// src itself if it lies inside a live MallocHost allocation, otherwise a
// copy taken now.
func (d *Device) htodSource(src []byte) []byte {
	if d.isHostMemory(src) {
		return src
	}
	return append([]byte(nil), src...)
}
