// Conformance of peer access (gpu.Peer) between two devices a and b of one
// backend whose topology lets a access b: once b's pool grants a access, a
// kernel on a reads what b wrote there, in allocations made before and
// after the grant, and PoolAccess says so (revoking says none again);
// Malloc memory follows EnablePeerAccess; copies need no access (peer
// copies and routed ones); requests the topology forbids, bad access
// values and devices of another backend are typed errors. No kernel here
// touches memory it may not: on the card that fault poisons the context
// (the simulator's own tests check it fails).

package gputest

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// RunPeer runs the peer-access suite on a and b, two devices of one
// backend, a able to access b (CanAccessPeer), as subtests of t. denied, if
// not nil, is a device that a cannot access, for the refusals.
func RunPeer(t *testing.T, a, b, denied gpu.Device) {
	t.Helper()
	pa, err := gpu.PeerOf(a)
	must(t, err)
	ok, err := pa.CanAccessPeer(b)
	must(t, err)
	if !ok {
		t.Fatalf("gputest: device %d cannot access device %d", a.Ordinal(), b.Ordinal())
	}
	for _, c := range []struct {
		name string
		fn   func(*testing.T, gpu.Device, gpu.Device, gpu.Device)
	}{
		{"PoolAccess", testPeerPoolAccess},
		{"MallocAccess", testPeerMallocAccess},
		{"CopyPeer", testPeerCopy},
		{"BadInput", testPeerBadInput},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, a, b, denied) })
	}
}

// testPeerPoolAccess: b's pool memory, written by b, read back by a kernel
// and a copy on a once SetPoolAccess granted a access; the access covers
// allocations made after the grant; revoking reads back as none.
func testPeerPoolAccess(t *testing.T, a, b, _ gpu.Device) {
	pb, _ := gpu.PeerOf(b)
	sa, sb := newStream(t, a), newStream(t, b)
	kb, ka := load(t, b), load(t, a)
	pool, err := b.NewMemPool()
	must(t, err)
	t.Cleanup(func() { pool.Destroy() })
	const n = 1 << 16 // words
	p, err := b.MallocFromPoolAsync(4*n, pool, sb)
	must(t, err)
	must(t, kb.Fill(sb, p, n, 7))
	must(t, sb.Synchronize())
	local, err := a.Malloc(4 * n)
	must(t, err)
	defer a.Free(local)

	acc, err := pb.PoolAccess(pool, a)
	must(t, err)
	if acc != gpu.AccessNone {
		t.Fatalf("PoolAccess before the grant: %v, want none", acc)
	}

	must(t, pb.SetPoolAccess(pool, a, gpu.AccessReadWrite))
	if acc, err := pb.PoolAccess(pool, a); err != nil || acc != gpu.AccessReadWrite {
		t.Fatalf("PoolAccess after the grant: %v, %v", acc, err)
	}
	errs := newCounter(t, a, sa)
	must(t, ka.Check(sa, p, n, 7, errs.p)) // a kernel of a reads b's memory
	must(t, a.CopyDtoDAsync(local, p, 4*n, sa))
	must(t, ka.Check(sa, local, n, 7, errs.p))
	if got := errs.read(t, sa); got != 0 {
		t.Fatalf("a read b's pool memory with %d mismatches", got)
	}
	// An allocation made after the grant is covered too.
	q, err := b.MallocFromPoolAsync(4*n, pool, sb)
	must(t, err)
	must(t, kb.Fill(sb, q, n, 9))
	must(t, sb.Synchronize())
	must(t, ka.Check(sa, q, n, 9, errs.p))
	if got := errs.read(t, sa); got != 0 {
		t.Fatalf("a read a later allocation of b's pool with %d mismatches", got)
	}
	must(t, pb.SetPoolAccess(pool, a, gpu.AccessNone))
	if acc, err := pb.PoolAccess(pool, a); err != nil || acc != gpu.AccessNone {
		t.Fatalf("PoolAccess after revoking: %v, %v", acc, err)
	}
	must(t, b.FreeAsync(p, sb))
	must(t, b.FreeAsync(q, sb))
	must(t, sb.Synchronize())
}

// testPeerMallocAccess: once a enabled access to b, a kernel on a writes
// b's Malloc memory and b reads it; enabling twice is ErrPeerEnabled.
// Copies between the devices work before and after.
func testPeerMallocAccess(t *testing.T, a, b, _ gpu.Device) {
	pa, _ := gpu.PeerOf(a)
	sa, sb := newStream(t, a), newStream(t, b)
	const n = 1024 // words
	p, err := b.Malloc(4 * n)
	must(t, err)
	defer b.Free(p)
	local, err := a.Malloc(4 * n)
	must(t, err)
	defer a.Free(local)
	must(t, a.MemsetD8Async(p, 0x5a, 4*n, sa)) // routed: no access needed
	must(t, a.CopyDtoDAsync(local, p, 4*n, sa))
	got := make([]byte, 4*n)
	must(t, a.CopyDtoHAsync(got, local, sa))
	must(t, sa.Synchronize())
	for i, v := range got {
		if v != 0x5a {
			t.Fatalf("byte %d = %#x after a set b's memory to 0x5a", i, v)
		}
	}
	must(t, pa.EnablePeerAccess(b))
	wantErr(t, "EnablePeerAccess twice", pa.EnablePeerAccess(b), gpu.ErrPeerEnabled)
	must(t, load(t, a).Fill(sa, p, n, 3)) // a kernel of a writes b's memory
	must(t, sa.Synchronize())
	errs := newCounter(t, b, sb)
	must(t, load(t, b).Check(sb, p, n, 3, errs.p))
	if got := errs.read(t, sb); got != 0 {
		t.Fatalf("b read what a's kernel wrote with %d mismatches", got)
	}
}

// testPeerCopy: CopyPeerAsync moves bytes between the devices, either way,
// with no access granted, enqueued on either device's stream.
func testPeerCopy(t *testing.T, a, b, _ gpu.Device) {
	pa, _ := gpu.PeerOf(a)
	pb, _ := gpu.PeerOf(b)
	sa, sb := newStream(t, a), newStream(t, b)
	const n = 3*4096 + 4
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i * 13)
	}
	pool, err := a.NewMemPool() // no access granted to b
	must(t, err)
	t.Cleanup(func() { pool.Destroy() })
	x, err := a.MallocFromPoolAsync(n, pool, sa)
	must(t, err)
	y, err := b.Malloc(n)
	must(t, err)
	defer b.Free(y)
	z, err := a.MallocFromPoolAsync(n, pool, sa)
	must(t, err)
	must(t, a.CopyHtoDAsync(x, src, sa))
	must(t, pa.CopyPeerAsync(y, b, x, a, n, sa)) // a -> b on a's stream
	must(t, sa.Synchronize())
	must(t, pb.CopyPeerAsync(z, a, y, b, n, sb)) // b -> a on b's stream
	must(t, sb.Synchronize())
	got := make([]byte, n)
	must(t, a.CopyDtoHAsync(got, z, sa))
	must(t, sa.Synchronize())
	if i := firstDiff(got, src); i >= 0 {
		t.Fatalf("byte %d after two peer copies: %#x, want %#x", i, got[i], src[i])
	}
	wantErr(t, "peer copy of a negative size", pa.CopyPeerAsync(y, b, x, a, -1, sa), gpu.ErrInvalidValue)
	must(t, pa.CopyPeerAsync(y, b, x, a, 0, sa))
	must(t, a.FreeAsync(x, sa))
	must(t, a.FreeAsync(z, sa))
	must(t, sa.Synchronize())
}

// testPeerBadInput: the refusals, each typed.
func testPeerBadInput(t *testing.T, a, b, denied gpu.Device) {
	pa, _ := gpu.PeerOf(a)
	pb, _ := gpu.PeerOf(b)
	if ok, err := pa.CanAccessPeer(a); err != nil || ok {
		t.Errorf("CanAccessPeer(itself) = %v, %v; want false", ok, err)
	}
	wantErr(t, "EnablePeerAccess(itself)", pa.EnablePeerAccess(a), gpu.ErrPeerUnsupported)
	wantErr(t, "CanAccessPeer(nil)", second(pa.CanAccessPeer(nil)), gpu.ErrInvalidHandle)
	pool, err := b.NewMemPool()
	must(t, err)
	t.Cleanup(func() { pool.Destroy() })
	wantErr(t, "SetPoolAccess(bad access)", pb.SetPoolAccess(pool, a, gpu.Access(2)), gpu.ErrInvalidValue)
	wantErr(t, "SetPoolAccess(own device, read)", pb.SetPoolAccess(pool, b, gpu.AccessRead), gpu.ErrInvalidValue)
	must(t, pb.SetPoolAccess(pool, b, gpu.AccessReadWrite))
	wantErr(t, "SetPoolAccess(another device's pool)", pa.SetPoolAccess(pool, b, gpu.AccessReadWrite), gpu.ErrWrongDevice)
	wantErr(t, "SetPoolAccess(nil pool)", pb.SetPoolAccess(nil, a, gpu.AccessReadWrite), gpu.ErrInvalidHandle)
	if denied != nil {
		pd, _ := gpu.PeerOf(denied)
		if ok, err := pd.CanAccessPeer(b); err != nil || ok {
			t.Fatalf("CanAccessPeer of the denied device = %v, %v", ok, err)
		}
		wantErr(t, "SetPoolAccess for a device the topology forbids", pb.SetPoolAccess(pool, denied, gpu.AccessReadWrite), gpu.ErrPeerUnsupported)
		wantErr(t, "EnablePeerAccess the topology forbids", pd.EnablePeerAccess(b), gpu.ErrPeerUnsupported)
		if acc, err := pb.PoolAccess(pool, denied); err != nil || acc != gpu.AccessNone {
			t.Errorf("PoolAccess after a refused grant: %v, %v", acc, err)
		}
	}
}
