// Peer access: several simulated devices of one Backend, and which of them
// may touch which one's memory.
//
// Config.PeerAccess is the topology (cuDeviceCanAccessPeer). Each segment
// names the mask of devices granted access to it: a pool's chunks share the
// pool's mask (cuMemPoolSetAccess covers every allocation, present and
// future), Malloc memory shares its device's mask (a peer's
// cuCtxEnablePeerAccess covers all of it), managed memory is everyone's.
// A kernel's lookup that finds no segment of its own device at an address
// asks the device whose address range holds it (each device has a range of
// its own), and takes the segment only if its own bit is in the mask: so a
// kernel on device B that touches A's memory fails while it runs
// (gpu.ErrIllegalAddress, a sticky error of the stream), exactly as one
// touching unmapped memory does, until access is granted; revoking makes
// later kernels fail again. Copies and sets are routed by the driver
// between the devices of the host whatever the access (unified
// addressing), so their lookups take any device's segment.
//
// Known differences: read-only access (AccessRead) lets a peer write too,
// since the model does not tell reads from writes at a lookup; a peer copy
// on a capturing stream is refused with gpu.ErrNotSupported.
//
// The masks are atomics read by stream workers with race synchronization
// disabled, so granting access adds no happens-before edge. Devices beyond
// the 64th never get access.

package sim

import (
	"fmt"
	"sync/atomic"

	"github.com/streamalloc/streamalloc/gpu"
)

var _ gpu.Peer = (*Device)(nil)

// everyDevice is the mask of managed memory.
var everyDevice = func() (m atomic.Uint64) { m.Store(^uint64(0)); return }()

// bit is the mask bit of device ordinal o (0 beyond 63).
func bit(o int) uint64 {
	if o < 0 || o > 63 {
		return 0
	}
	return 1 << uint(o)
}

// peerSegment finds, for a lookup of d that found nothing of d's own, the
// segment of the device whose address range holds p, if d may access it.
//
//go:norace
func (d *Device) peerSegment(p uint64, routed bool) *segment {
	if p < vaBase || len(d.b.devices) < 2 {
		return nil
	}
	o := (p - vaBase) / d.b.stride
	if o >= uint64(len(d.b.devices)) || int(o) == d.ordinal {
		return nil
	}
	s := d.b.devices[o].segs.find(p)
	if s == nil || routed {
		return s
	}
	if s.peers == nil {
		return nil
	}
	raceDisable()
	ok := s.peers.Load()&bit(d.ordinal) != 0
	raceEnable()
	if !ok {
		return nil
	}
	return s
}

// peerDevice resolves a device of this backend for call.
func (d *Device) peerDevice(call string, peer gpu.Device) (*Device, error) {
	pd, ok := peer.(*Device)
	switch {
	case peer == nil || (ok && pd == nil):
		return nil, wrap(call, fmt.Errorf("nil device: %w", gpu.ErrInvalidHandle))
	case !ok:
		return nil, wrap(call, fmt.Errorf("device of another backend (%T): %w", peer, gpu.ErrWrongDevice))
	case pd.b != d.b:
		return nil, wrap(call, fmt.Errorf("%v of another simulated backend: %w", pd, gpu.ErrWrongDevice))
	}
	return pd, nil
}

// canAccess is the topology: whether d may access pd's memory.
func (d *Device) canAccess(pd *Device) bool {
	if pd == d {
		return false
	}
	m := d.b.cfg.PeerAccess
	if m == nil {
		return true
	}
	return d.ordinal < len(m) && pd.ordinal < len(m[d.ordinal]) && m[d.ordinal][pd.ordinal]
}

// CanAccessPeer is cuDeviceCanAccessPeer, answered from Config.PeerAccess.
func (d *Device) CanAccessPeer(peer gpu.Device) (bool, error) {
	pd, err := d.peerDevice("cuDeviceCanAccessPeer", peer)
	if err != nil {
		return false, err
	}
	return d.canAccess(pd), nil
}

// allowed refuses a peer the topology does not allow.
func (d *Device) allowed(call string, pd *Device) error {
	if !d.canAccess(pd) {
		return wrap(call, fmt.Errorf("%v cannot access %v: %w", d, pd, gpu.ErrPeerUnsupported))
	}
	return nil
}

// EnablePeerAccess is cuCtxEnablePeerAccess: d's work may touch pd's
// Malloc memory from now on. A second call is gpu.ErrPeerEnabled.
func (d *Device) EnablePeerAccess(peer gpu.Device) error {
	const call = "cuCtxEnablePeerAccess"
	pd, err := d.peerDevice(call, peer)
	if err != nil {
		return err
	}
	if err := d.allowed(call, pd); err != nil {
		return err
	}
	for {
		old := pd.mallocPeers.Load()
		if old&bit(d.ordinal) != 0 {
			return driverErrf(call, gpu.ErrPeerEnabled, "%v already accesses %v", d, pd)
		}
		if pd.mallocPeers.CompareAndSwap(old, old|bit(d.ordinal)) {
			return nil
		}
	}
}

// SetPoolAccess is cuMemPoolSetAccess: what peer's work may do with the
// memory of gp, a pool of d.
func (d *Device) SetPoolAccess(gp gpu.MemPool, peer gpu.Device, a gpu.Access) error {
	const call = "cuMemPoolSetAccess"
	p, err := d.pool(call, gp)
	if err != nil {
		return err
	}
	if err := p.checkLive(call); err != nil {
		return err
	}
	pd, err := d.peerDevice(call, peer)
	if err != nil {
		return err
	}
	if !a.Valid() {
		return driverErrf(call, gpu.ErrInvalidValue, "access %v", a)
	}
	if pd == d {
		if a != gpu.AccessReadWrite {
			return driverErrf(call, gpu.ErrInvalidValue, "the pool's own device always reads and writes it, not %v", a)
		}
		return nil
	}
	if err := d.allowed(call, pd); err != nil {
		return err
	}
	b := bit(pd.ordinal)
	d.mu.Lock()
	defer d.mu.Unlock()
	peers, ro := p.peers.Load()&^b, p.peerRead.Load()&^b
	switch a {
	case gpu.AccessRead:
		peers, ro = peers|b, ro|b
	case gpu.AccessReadWrite:
		peers |= b
	}
	raceDisable()
	p.peers.Store(peers)
	p.peerRead.Store(ro)
	raceEnable()
	return nil
}

// PoolAccess is cuMemPoolGetAccess.
func (d *Device) PoolAccess(gp gpu.MemPool, peer gpu.Device) (gpu.Access, error) {
	const call = "cuMemPoolGetAccess"
	p, err := d.pool(call, gp)
	if err != nil {
		return 0, err
	}
	if err := p.checkLive(call); err != nil {
		return 0, err
	}
	pd, err := d.peerDevice(call, peer)
	if err != nil {
		return 0, err
	}
	if pd == d {
		return gpu.AccessReadWrite, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	b := bit(pd.ordinal)
	switch {
	case p.peers.Load()&b == 0:
		return gpu.AccessNone, nil
	case p.peerRead.Load()&b != 0:
		return gpu.AccessRead, nil
	}
	return gpu.AccessReadWrite, nil
}

// CopyPeerAsync is cuMemcpyPeerAsync: it needs no access, and looks each
// range up on its own device.
func (d *Device) CopyPeerAsync(dst gpu.DevicePtr, dstDev gpu.Device, src gpu.DevicePtr, srcDev gpu.Device, n int, gs gpu.Stream) error {
	const call = "cuMemcpyPeerAsync"
	dd, err := d.peerDevice(call, dstDev)
	if err != nil {
		return err
	}
	sd, err := d.peerDevice(call, srcDev)
	if err != nil {
		return err
	}
	s, err := d.stream(call, gs)
	if err != nil {
		return err
	}
	if err := d.injectNamed(OpCopy, call); err != nil {
		return err
	}
	switch {
	case n < 0:
		return driverErrf(call, gpu.ErrInvalidValue, "negative size %d", n)
	case n == 0:
		return nil
	case !dd.own(dst, n):
		return driverErrf(call, gpu.ErrInvalidValue, "[%#x, +%d) is not inside one allocation of %v", uint64(dst), n, dd)
	case !sd.own(src, n):
		return driverErrf(call, gpu.ErrInvalidValue, "[%#x, +%d) is not inside one allocation of %v", uint64(src), n, sd)
	}
	o := &op{kind: opCopyPeer, name: call, dst: dst, src: src, n: n, dstDev: dd, srcDev: sd}
	if s.cs.capt.Load() != nil {
		return wrap(call, fmt.Errorf("a peer copy in a capture is not modelled: %w", gpu.ErrNotSupported))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return wrap(call, gpu.ErrDestroyed)
	}
	s.enqueueLocked(o)
	return nil
}

// own reports whether [p, p+n) lies inside one segment of d's own.
func (d *Device) own(p gpu.DevicePtr, n int) bool {
	s := d.segs.find(uint64(p))
	return s != nil && uint64(p)+uint64(n) <= s.base+s.size && uint64(p)+uint64(n) > uint64(p) &&
		(s.vm == nil || s.accessible(uint64(p)-s.base, uint64(n)))
}

// runCopyPeer copies between the devices of a peer copy.
func runCopyPeer(o *op) error {
	dd, sd := o.dstDev, o.srcDev
	if !sd.own(o.src, o.n) {
		return driverErrf(o.name, gpu.ErrIllegalAddress, "source [%#x, +%d) is not inside one allocation of %v", uint64(o.src), o.n, sd)
	}
	if !dd.own(o.dst, o.n) {
		return driverErrf(o.name, gpu.ErrIllegalAddress, "destination [%#x, +%d) is not inside one allocation of %v", uint64(o.dst), o.n, dd)
	}
	return dd.chunks(o.name, o.dst, o.n, func(off int, b []byte) error {
		return sd.chunks(o.name, o.src+gpu.DevicePtr(off), len(b), func(off2 int, sb []byte) error {
			copy(b[off2:], sb)
			return nil
		})
	})
}
