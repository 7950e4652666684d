package mr_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// peerDevices: devices 0 and 1 reach each other, device 2 reaches none.
func peerDevices(t *testing.T) (a, b, c gpu.Device) {
	t.Helper()
	be := sim.New(sim.Config{Devices: 3, Capacity: 1 << 30, PeerAccess: [][]bool{
		{false, true, false}, {true, false, false}, {false, false, false},
	}})
	a, _ = be.Device(0)
	b, _ = be.Device(1)
	c, _ = be.Device(2)
	return a, b, c
}

// readsOnPeer reports the error of a kernel of peer that checks n words
// of pattern seed at p: nil when it read them all.
func readsOnPeer(t *testing.T, peer gpu.Device, p gpu.DevicePtr, n int, seed uint32) error {
	t.Helper()
	k, err := kernels.Load(peer)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := peer.NewStream()
	defer s.Destroy()
	cnt, _ := peer.Malloc(4)
	defer peer.Free(cnt)
	if err := peer.MemsetD8Async(cnt, 0, 4, s); err != nil {
		t.Fatal(err)
	}
	if err := k.Check(s, p, n, seed, cnt); err != nil {
		t.Fatal(err)
	}
	var got [4]byte
	if err := peer.CopyDtoHAsync(got[:], cnt, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		return err
	}
	if got != [4]byte{} {
		t.Fatalf("the peer read %v mismatches", got)
	}
	return nil
}

// TestGrantPeerThroughStacks: a grant at the top of a stack reaches the
// resource at its bottom, so a peer's kernels read allocations made
// before the grant (a Pool's chunk taken earlier) and after it (a chunk
// grown later), and nothing before it; for every bottom that grants
// (Async, Direct) under adaptors and suballocators. Refusals are typed.
func TestGrantPeerThroughStacks(t *testing.T) {
	for _, c := range []struct {
		name string
		make func(dev gpu.Device) (mr.Resource, func())
	}{
		{"stats>pool>async", func(dev gpu.Device) (mr.Resource, func()) {
			a, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
			if err != nil {
				t.Fatal(err)
			}
			p, err := mr.NewPool(a, mr.PoolOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return mr.NewStats(p, mr.StatsOptions{}), func() { p.Close(); a.Close() }
		}},
		{"pool>direct", func(dev gpu.Device) (mr.Resource, func()) {
			p, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return p, func() { p.Close() }
		}},
		{"async", func(dev gpu.Device) (mr.Resource, func()) {
			a, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
			if err != nil {
				t.Fatal(err)
			}
			return a, func() { a.Close() }
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b, far := peerDevices(t)
			r, done := c.make(a)
			defer done()
			k, _ := kernels.Load(a)
			s, _ := a.NewStream()
			const n = 1 << 12
			before, err := r.Allocate(4*n, s)
			if err != nil {
				t.Fatal(err)
			}
			if err := k.Fill(s, before, n, 1); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if err := readsOnPeer(t, b, before, n, 1); !errors.Is(err, gpu.ErrIllegalAddress) {
				t.Fatalf("a peer's kernel before the grant: %v, want gpu.ErrIllegalAddress", err)
			}
			if err := mr.GrantPeer(r, b, gpu.AccessReadWrite); err != nil {
				t.Fatal(err)
			}
			if err := readsOnPeer(t, b, before, n, 1); err != nil {
				t.Fatalf("memory allocated before the grant: %v", err)
			}
			// A big request makes a Pool grow a chunk of its own after
			// the grant.
			const big = 64 << 20
			after, err := r.Allocate(big, s)
			if err != nil {
				t.Fatal(err)
			}
			if err := k.Fill(s, after, big/4, 2); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if err := readsOnPeer(t, b, after, big/4, 2); err != nil {
				t.Fatalf("memory allocated after the grant: %v", err)
			}
			if err := mr.GrantPeer(r, far, gpu.AccessReadWrite); !errors.Is(err, gpu.ErrPeerUnsupported) {
				t.Errorf("a grant the topology forbids: %v, want gpu.ErrPeerUnsupported", err)
			}
			if err := mr.GrantPeer(r, b, gpu.Access(7)); err == nil {
				t.Error("a grant of an invalid access succeeded")
			}
			for _, p := range []struct {
				p gpu.DevicePtr
				n int
			}{{before, 4 * n}, {after, big}} {
				if err := r.Deallocate(p.p, p.n, s); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestGrantPeerRefusals: stacks that cannot grant, and accesses a
// context cannot give.
func TestGrantPeerRefusals(t *testing.T) {
	a, b, _ := peerDevices(t)
	v, err := mr.NewVirtual(a, mr.VirtualOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := mr.GrantPeer(v, b, gpu.AccessReadWrite); !errors.Is(err, gpu.ErrNotSupported) {
		t.Errorf("GrantPeer on Virtual: %v, want gpu.ErrNotSupported", err)
	}
	d := mr.NewDirect(a)
	if err := mr.GrantPeer(d, b, gpu.AccessRead); !errors.Is(err, gpu.ErrNotSupported) {
		t.Errorf("read-only access through Direct: %v, want gpu.ErrNotSupported", err)
	}
	if err := mr.GrantPeer(d, b, gpu.AccessReadWrite); err != nil {
		t.Fatal(err)
	}
	if err := mr.GrantPeer(d, b, gpu.AccessReadWrite); err != nil {
		t.Errorf("a second grant through Direct: %v, want nil", err)
	}
	if err := mr.GrantPeer(d, nil, gpu.AccessReadWrite); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("a nil peer: %v, want gpu.ErrInvalidHandle", err)
	}
	m := mr.NewManaged(a)
	if err := mr.GrantPeer(m, b, gpu.AccessReadWrite); err != nil {
		t.Errorf("managed memory: %v", err)
	}
}
