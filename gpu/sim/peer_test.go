package sim_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/gputest"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// threeDevices is a backend where devices 0 and 1 reach each other and
// device 2 reaches nothing and is reached by nothing.
func threeDevices(t *testing.T) (a, b, c *sim.Device) {
	t.Helper()
	be := sim.New(sim.Config{Devices: 3, Capacity: 1 << 30, PeerAccess: [][]bool{
		{false, true, false},
		{true, false, false},
		{false, false, false},
	}})
	devs := make([]*sim.Device, 3)
	for i := range devs {
		d, err := be.Device(i)
		if err != nil {
			t.Fatal(err)
		}
		devs[i] = d.(*sim.Device)
	}
	return devs[0], devs[1], devs[2]
}

// TestPeerConformance runs the peer-access suite on two simulated devices,
// with a third the topology keeps apart.
func TestPeerConformance(t *testing.T) {
	a, b, c := threeDevices(t)
	gputest.RunPeer(t, a, b, c)
}

// TestPeerKernelNeedsAccess: a kernel of device a touching device b's pool
// or Malloc memory fails with gpu.ErrIllegalAddress (a fault on the card,
// so the conformance suite never does it) until access is granted, and
// again once a pool's access is revoked; the topology's matrix is what
// CanAccessPeer answers.
func TestPeerKernelNeedsAccess(t *testing.T) {
	a, b, c := threeDevices(t)
	for _, x := range []struct {
		from, to *sim.Device
		want     bool
	}{{a, b, true}, {b, a, true}, {a, c, false}, {c, a, false}, {b, c, false}, {a, a, false}} {
		if got, err := x.from.CanAccessPeer(x.to); err != nil || got != x.want {
			t.Errorf("%v.CanAccessPeer(%v) = %v, %v; want %v", x.from, x.to, got, err, x.want)
		}
	}
	other := sim.New(sim.Config{})
	od, _ := other.Device(0)
	if _, err := a.CanAccessPeer(od); !errors.Is(err, gpu.ErrWrongDevice) {
		t.Errorf("CanAccessPeer(device of another backend): %v, want gpu.ErrWrongDevice", err)
	}

	ka, _ := kernels.Load(a)
	kb, _ := kernels.Load(b)
	sb, _ := b.NewStream()
	pool, _ := b.NewMemPool()
	const n = 1024
	p, err := b.MallocFromPoolAsync(4*n, pool, sb)
	if err != nil {
		t.Fatal(err)
	}
	if err := kb.Fill(sb, p, n, 1); err != nil {
		t.Fatal(err)
	}
	if err := sb.Synchronize(); err != nil {
		t.Fatal(err)
	}
	try := func(what string, ptr gpu.DevicePtr, want error) {
		t.Helper()
		s, _ := a.NewStream()
		defer s.Destroy()
		if err := ka.Fill(s, ptr, n, 2); err != nil {
			t.Fatal(err)
		}
		err := s.Synchronize()
		if want == nil && err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if want != nil {
			wantErr(t, what, err, want)
		}
	}
	try("a kernel of a writing b's pool memory before the grant", p, gpu.ErrIllegalAddress)
	if err := b.SetPoolAccess(pool, a, gpu.AccessReadWrite); err != nil {
		t.Fatal(err)
	}
	try("after the grant", p, nil)
	if err := b.SetPoolAccess(pool, a, gpu.AccessNone); err != nil {
		t.Fatal(err)
	}
	try("after revoking", p, gpu.ErrIllegalAddress)

	m, _ := b.Malloc(4 * n)
	try("a kernel of a writing b's Malloc memory before EnablePeerAccess", m, gpu.ErrIllegalAddress)
	if err := a.EnablePeerAccess(b); err != nil {
		t.Fatal(err)
	}
	try("after EnablePeerAccess", m, nil)
	// Access is one way: b's kernels still cannot touch a's memory.
	am, _ := a.Malloc(4 * n)
	if err := kb.Fill(sb, am, n, 3); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "a kernel of b writing a's Malloc memory", sb.Synchronize(), gpu.ErrIllegalAddress)
}

// TestPeerOrderedByHost: a kernel of device a writes b's memory behind a
// held stream; b's check, enqueued once the host saw a's event complete,
// reads every word (and, under -race, without a data race: the
// completion orders the two devices' work as it orders two streams').
func TestPeerOrderedByHost(t *testing.T) {
	a, b, _ := threeDevices(t)
	ka, _ := kernels.Load(a)
	kb, _ := kernels.Load(b)
	sa, _ := a.NewStream()
	sb, _ := b.NewStream()
	pool, _ := b.NewMemPool()
	if err := b.SetPoolAccess(pool, a, gpu.AccessReadWrite); err != nil {
		t.Fatal(err)
	}
	const n = 1 << 14
	p, _ := b.MallocFromPoolAsync(4*n, pool, sb)
	if err := sb.Synchronize(); err != nil {
		t.Fatal(err)
	}
	hold := a.Hold(sa) // a's write runs only once released
	if err := ka.Fill(sa, p, n, 5); err != nil {
		t.Fatal(err)
	}
	e, _ := a.NewEvent(false)
	if err := e.Record(sa); err != nil {
		t.Fatal(err)
	}
	hold()
	if err := e.Synchronize(); err != nil {
		t.Fatal(err)
	}
	cnt, _ := b.Malloc(4)
	if err := b.MemsetD8Async(cnt, 0, 4, sb); err != nil {
		t.Fatal(err)
	}
	if err := kb.Check(sb, p, n, 5, cnt); err != nil {
		t.Fatal(err)
	}
	var got [4]byte
	if err := b.CopyDtoHAsync(got[:], cnt, sb); err != nil {
		t.Fatal(err)
	}
	if err := sb.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if got != [4]byte{} {
		t.Fatalf("b read a's write with %v mismatches", got)
	}
}

// twoProcesses returns the same simulated GPU as two processes see it: a
// device of each of two Backends.
func twoProcesses(t *testing.T) (exp, imp *sim.Device) {
	t.Helper()
	a, _ := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
	b, _ := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
	return a.(*sim.Device), b.(*sim.Device)
}

// TestIPCConformance runs the interprocess suites between two simulated
// processes, and the one-process refusals.
func TestIPCConformance(t *testing.T) {
	exp, imp := twoProcesses(t)
	gputest.RunIPC(t, exp, imp)
	gputest.RunIPCBadInput(t, exp)
}
