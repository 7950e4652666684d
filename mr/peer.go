// Peer access through a resource: another device of the host made able to
// read and write every allocation a resource hands out, now and later.
//
// Access is granted where the memory comes from, never per allocation: a
// driver pool grants it to all its allocations at once (cuMemPoolSetAccess),
// and a peer's context that enabled access reaches all of a device's
// cuMemAlloc memory (cuCtxEnablePeerAccess). So the resource at the bottom
// of a stack grants it (PeerGranter: Async, Direct, Managed), and every
// adaptor and suballocator above passes the grant down: a Pool's chunks,
// an Arena's superblocks and the bins of a Binning are allocations of their
// upstream, covered whether they were taken before the grant or after.
// GrantPeer walks the stack (Walk) to the first PeerGranter.
//
// Refusals are typed: a peer the topology does not let reach the device is
// gpu.ErrPeerUnsupported (the backend's answer, before the driver), a
// stack with no granter (Virtual, whose mappings would each need
// cuMemSetAccess; a resource from outside this package) gpu.ErrNotSupported,
// an access a granter cannot give (Direct cannot give read-only access nor
// take it back: contexts share all or nothing) gpu.ErrNotSupported too.

package mr

import (
	"errors"
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

// PeerGranter is implemented by resources that can let another device
// access all the memory they hand out, present and future.
type PeerGranter interface {
	GrantPeer(peer gpu.Device, a gpu.Access) error
}

// GrantPeer gives peer access a to every allocation r hands out, now and
// later, through the first PeerGranter of r's stack.
func GrantPeer(r Resource, peer gpu.Device, a gpu.Access) error {
	for _, x := range Walk(r) {
		if g, ok := x.(PeerGranter); ok {
			if err := g.GrantPeer(peer, a); err != nil {
				return fmt.Errorf("mr: grant peer access: %w", err)
			}
			return nil
		}
	}
	return fmt.Errorf("mr: grant peer access: no resource of the stack (%T at the top) grants it: %w", r, gpu.ErrNotSupported)
}

// GrantPeer sets the access of peer to the resource's pool
// (cuMemPoolSetAccess). On the device's default pool that is every user's
// pool in the process.
func (r *Async) GrantPeer(peer gpu.Device, a gpu.Access) error {
	p, err := gpu.PeerOf(r.dev)
	if err != nil {
		return fmt.Errorf("async: %w", err)
	}
	if err := p.SetPoolAccess(r.pool, peer, a); err != nil {
		return fmt.Errorf("async: %w", err)
	}
	return nil
}

// GrantPeer enables peer's access to the device's cuMemAlloc memory
// (cuCtxEnablePeerAccess from peer's context; already enabled is no
// error). Only read-write access can be given, and never taken back.
func (r *Direct) GrantPeer(peer gpu.Device, a gpu.Access) error {
	return grantContext("direct", r.core.dev, peer, a)
}

// GrantPeer grants nothing: managed memory reaches every device of the
// host already. It refuses what the topology forbids, and any access but
// read-write.
func (r *Managed) GrantPeer(peer gpu.Device, a gpu.Access) error {
	if a != gpu.AccessReadWrite {
		return fmt.Errorf("managed: access %v: managed memory is read-write everywhere: %w", a, gpu.ErrNotSupported)
	}
	if peer == nil {
		return fmt.Errorf("managed: nil peer: %w", gpu.ErrInvalidHandle)
	}
	p, err := gpu.PeerOf(peer)
	if err != nil {
		return fmt.Errorf("managed: %w", err)
	}
	ok, err := p.CanAccessPeer(r.core.dev)
	if err != nil {
		return fmt.Errorf("managed: %w", err)
	}
	if !ok && peer != r.core.dev {
		return fmt.Errorf("managed: device %d cannot access device %d: %w", peer.Ordinal(), r.core.dev.Ordinal(), gpu.ErrPeerUnsupported)
	}
	return nil
}

func grantContext(name string, dev, peer gpu.Device, a gpu.Access) error {
	if a != gpu.AccessReadWrite {
		return fmt.Errorf("%s: access %v: a context's peer access is read-write and cannot be revoked: %w", name, a, gpu.ErrNotSupported)
	}
	if peer == nil {
		return fmt.Errorf("%s: nil peer: %w", name, gpu.ErrInvalidHandle)
	}
	p, err := gpu.PeerOf(peer)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := p.EnablePeerAccess(dev); err != nil && !errors.Is(err, gpu.ErrPeerEnabled) {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
