// Peer access: gpu.Peer over cuDeviceCanAccessPeer, cuCtxEnablePeerAccess,
// cuMemPoolSetAccess/GetAccess and cuMemcpyPeerAsync, between the primary
// contexts of the devices. Requests the topology does not allow are
// refused here, before the driver, with gpu.ErrPeerUnsupported, so that
// both backends answer the same.

package cudagpu

import (
	"fmt"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
)

var _ gpu.Peer = (*Device)(nil)

// peerDevice resolves a peer for op: a CUDA device of this backend.
func peerDevice(op string, peer gpu.Device) (*Device, error) {
	pd, ok := peer.(*Device)
	switch {
	case peer == nil || (ok && pd == nil):
		return nil, fmt.Errorf("cudagpu: %s: nil device: %w", op, gpu.ErrInvalidHandle)
	case !ok:
		return nil, fmt.Errorf("cudagpu: %s: device %T is not a CUDA device: %w", op, peer, gpu.ErrWrongDevice)
	}
	return pd, nil
}

// CanAccessPeer is cuDeviceCanAccessPeer; a device is not its own peer.
func (d *Device) CanAccessPeer(peer gpu.Device) (bool, error) {
	pd, err := peerDevice("CanAccessPeer", peer)
	if err != nil {
		return false, err
	}
	if pd == d {
		return false, nil
	}
	return d.dev.CanAccessPeer(pd.dev)
}

// allowed refuses a peer the topology does not allow.
func (d *Device) allowed(op string, pd *Device) error {
	ok, err := d.CanAccessPeer(pd)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("cudagpu: %s: device %d cannot access device %d: %w", op, d.ordinal, pd.ordinal, gpu.ErrPeerUnsupported)
	}
	return nil
}

// EnablePeerAccess is cuCtxEnablePeerAccess: this device's work may touch
// peer's cuMemAlloc memory.
func (d *Device) EnablePeerAccess(peer gpu.Device) error {
	pd, err := peerDevice("EnablePeerAccess", peer)
	if err != nil {
		return err
	}
	if err := d.allowed("EnablePeerAccess", pd); err != nil {
		return err
	}
	return d.ctx.EnablePeerAccess(pd.ctx)
}

// SetPoolAccess is cuMemPoolSetAccess for peer on p, a pool of d.
func (d *Device) SetPoolAccess(p gpu.MemPool, peer gpu.Device, a gpu.Access) error {
	const op = "SetPoolAccess"
	cp, err := d.pool(op, p)
	if err != nil {
		return err
	}
	pd, err := peerDevice(op, peer)
	if err != nil {
		return err
	}
	if !a.Valid() {
		return fmt.Errorf("cudagpu: %s: access %v: %w", op, a, gpu.ErrInvalidValue)
	}
	if pd == d {
		if a != gpu.AccessReadWrite {
			return fmt.Errorf("cudagpu: %s: the pool's own device always reads and writes it, not %v: %w", op, a, gpu.ErrInvalidValue)
		}
	} else if err := d.allowed(op, pd); err != nil {
		return err
	}
	return d.ctx.MemPoolSetAccess(cp.h, pd.dev, cuda.AccessFlags(a))
}

// PoolAccess is cuMemPoolGetAccess for peer on p, a pool of d.
func (d *Device) PoolAccess(p gpu.MemPool, peer gpu.Device) (gpu.Access, error) {
	cp, err := d.pool("PoolAccess", p)
	if err != nil {
		return 0, err
	}
	pd, err := peerDevice("PoolAccess", peer)
	if err != nil {
		return 0, err
	}
	a, err := d.ctx.MemPoolAccess(cp.h, pd.dev)
	return gpu.Access(a), err
}

// CopyPeerAsync is cuMemcpyPeerAsync on s, a stream of d.
func (d *Device) CopyPeerAsync(dst gpu.DevicePtr, dstDev gpu.Device, src gpu.DevicePtr, srcDev gpu.Device, n int, s gpu.Stream) error {
	const op = "CopyPeerAsync"
	cs, err := d.stream(op, s)
	if err != nil {
		return err
	}
	dd, err := peerDevice(op, dstDev)
	if err != nil {
		return err
	}
	sd, err := peerDevice(op, srcDev)
	if err != nil {
		return err
	}
	if err := size(op, n); err != nil || n == 0 {
		return err
	}
	return d.ctx.MemcpyPeerAsync(cuda.DevicePtr(dst), dd.ctx, cuda.DevicePtr(src), sd.ctx, uint64(n), cs.h)
}
