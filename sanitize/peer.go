// Peer access through the instrumented device: gpu.Peer calls go to the
// device underneath with every device and stream unwrapped (a backend
// knows its own devices, not their instrumented views), and say
// ErrNotSupported when it has no peer access.
//
// Granting access orders nothing, and a peer copy is a copy like
// CopyDtoDAsync, which the sanitizer passes through unchecked; the pools
// named are the real device's, which the sanitizer never wraps.

package sanitize

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

var _ gpu.Peer = (*Device)(nil)

func (d *Device) peer(op string) (gpu.Peer, error) {
	p, err := gpu.PeerOf(d.Device)
	if err != nil {
		return nil, fmt.Errorf("sanitize: %s: %w", op, err)
	}
	return p, nil
}

// CanAccessPeer is the device's, with peer unwrapped.
func (d *Device) CanAccessPeer(peer gpu.Device) (bool, error) {
	p, err := d.peer("CanAccessPeer")
	if err != nil {
		return false, err
	}
	return p.CanAccessPeer(Unwrap(peer))
}

// EnablePeerAccess is the device's, with peer unwrapped.
func (d *Device) EnablePeerAccess(peer gpu.Device) error {
	p, err := d.peer("EnablePeerAccess")
	if err != nil {
		return err
	}
	return p.EnablePeerAccess(Unwrap(peer))
}

// SetPoolAccess is the device's, with peer unwrapped.
func (d *Device) SetPoolAccess(pool gpu.MemPool, peer gpu.Device, a gpu.Access) error {
	p, err := d.peer("SetPoolAccess")
	if err != nil {
		return err
	}
	return p.SetPoolAccess(pool, Unwrap(peer), a)
}

// PoolAccess is the device's, with peer unwrapped.
func (d *Device) PoolAccess(pool gpu.MemPool, peer gpu.Device) (gpu.Access, error) {
	p, err := d.peer("PoolAccess")
	if err != nil {
		return gpu.AccessNone, err
	}
	return p.PoolAccess(pool, Unwrap(peer))
}

// CopyPeerAsync is the device's, with both devices and the stream
// unwrapped.
func (d *Device) CopyPeerAsync(dst gpu.DevicePtr, dstDev gpu.Device, src gpu.DevicePtr, srcDev gpu.Device, n int, s gpu.Stream) error {
	p, err := d.peer("CopyPeerAsync")
	if err != nil {
		return err
	}
	return p.CopyPeerAsync(dst, Unwrap(dstDev), src, Unwrap(srcDev), n, unwrapStream(s))
}
