// Peer access in the backend interface: memory of one device used by the
// work of another device of the same host.
//
// A device's memory is its own until access is granted. What grants it
// depends on how the memory was allocated, as in the driver:
//
//   - a pool's allocations (MallocAsync, MallocFromPoolAsync), present and
//     future, become accessible to a peer with SetPoolAccess
//     (cuMemPoolSetAccess on the pool);
//   - Malloc memory of a device becomes accessible to a peer's work with
//     the peer's EnablePeerAccess (cuCtxEnablePeerAccess: the peer's
//     context may then touch every cuMemAlloc allocation of the device,
//     present and future);
//   - managed memory is accessible everywhere.
//
// A kernel of a device that touches a peer's memory without access fails
// like any illegal address, while it runs (ErrIllegalAddress; on the card
// the fault poisons the context). Copies and sets need no access: with
// unified addressing the driver routes them between the devices of the
// host (through the host where there is no peer path), and CopyPeerAsync
// names both devices explicitly.
//
// A request the topology does not allow (CanAccessPeer false: no P2P path
// between the two devices, or the same device named as its own peer) is
// refused before the driver is asked, with an error matching
// ErrPeerUnsupported; granting access a second time with EnablePeerAccess
// is ErrPeerEnabled, as the driver answers. A device of another backend
// is ErrWrongDevice.
//
// Peer is an optional part of the interface: both backends implement it
// (the simulator with a configurable matrix of which device may access
// which); PeerOf says ErrNotSupported for a device that does not.
package gpu

import "fmt"

// Access is what a device may do with memory it does not own: a
// CUmemAccess_flags value.
type Access int32

// Access values (cuda.h's).
const (
	AccessNone      Access = 0
	AccessRead      Access = 1
	AccessReadWrite Access = 3
)

// String names the access as cuda.h does, without its prefix.
func (a Access) String() string {
	switch a {
	case AccessNone:
		return "none"
	case AccessRead:
		return "read"
	case AccessReadWrite:
		return "read-write"
	}
	return fmt.Sprintf("gpu.Access(%d)", int32(a))
}

// Valid reports whether a is one of the three values.
func (a Access) Valid() bool { return a == AccessNone || a == AccessRead || a == AccessReadWrite }

// Peer is implemented by a Device whose memory other devices of the host
// can access, and which can access theirs. All methods are safe for
// concurrent use.
type Peer interface {
	// CanAccessPeer is cuDeviceCanAccessPeer: whether this device's work
	// can access peer's memory. A device is never its own peer.
	CanAccessPeer(peer Device) (bool, error)
	// EnablePeerAccess is cuCtxEnablePeerAccess: this device's work may
	// then access peer's Malloc memory, present and future.
	EnablePeerAccess(peer Device) error
	// SetPoolAccess is cuMemPoolSetAccess: peer's work may access every
	// allocation of p (a pool of this device), present and future, as a
	// says. The pool's own device always has read-write access; setting
	// anything else for it is ErrInvalidValue. AccessNone revokes.
	SetPoolAccess(p MemPool, peer Device, a Access) error
	// PoolAccess is cuMemPoolGetAccess: what peer may do with p's memory.
	PoolAccess(p MemPool, peer Device) (Access, error)
	// CopyPeerAsync is cuMemcpyPeerAsync: n bytes from src, memory of
	// srcDev, to dst, memory of dstDev, enqueued on s, a stream of this
	// device. It needs no peer access.
	CopyPeerAsync(dst DevicePtr, dstDev Device, src DevicePtr, srcDev Device, n int, s Stream) error
}

// PeerOf returns dev's peer-access interface, or an error matching
// ErrNotSupported if it has none.
func PeerOf(dev Device) (Peer, error) {
	if p, ok := dev.(Peer); ok {
		return p, nil
	}
	return nil, fmt.Errorf("gpu: device %T has no peer access: %w", dev, ErrNotSupported)
}
