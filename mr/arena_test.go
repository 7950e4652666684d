package mr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

func TestArenaOptions(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	up := mr.NewDirect(dev)
	for _, c := range []struct {
		opts mr.ArenaOptions
		err  error
	}{
		{mr.ArenaOptions{}, nil},
		{mr.ArenaOptions{SuperblockSize: 1000, LargeSize: 1024}, nil},
		{mr.ArenaOptions{SuperblockSize: -1}, mr.ErrInvalidSize},
		{mr.ArenaOptions{SuperblockSize: 2 << 30}, mr.ErrInvalidSize},
		{mr.ArenaOptions{SuperblockSize: 1 << 20, LargeSize: 2 << 20}, mr.ErrInvalidSize},
	} {
		if _, err := mr.NewArena(up, c.opts); !errors.Is(err, c.err) {
			t.Errorf("%+v: %v, want %v", c.opts, err, c.err)
		}
	}
	if _, err := mr.NewArena(nil, mr.ArenaOptions{}); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("nil upstream: %v", err)
	}
}

// TestArenaCoalesces checks that freed neighbours merge: after freeing a
// superblock's pieces in a scrambled order, one request takes it whole.
func TestArenaCoalesces(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	s := resStream(t, dev)
	const sb = 1 << 20
	r, err := mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{SuperblockSize: sb, LargeSize: sb})
	if err != nil {
		t.Fatal(err)
	}
	var ps []gpu.DevicePtr
	for range 16 {
		p, err := r.Allocate(sb/16, s)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if u := r.Usage(); u.Reserved != sb {
		t.Fatalf("16 pieces of one superblock: %+v", u)
	}
	for _, i := range []int{3, 1, 2, 0, 15, 7, 5, 6, 4, 8, 10, 9, 12, 11, 14, 13} {
		if err := r.Deallocate(ps[i], sb/16, s); err != nil {
			t.Fatal(err)
		}
	}
	p, err := r.Allocate(sb, s)
	if err != nil {
		t.Fatal(err)
	}
	if p != ps[0] || r.Usage().Reserved != sb {
		t.Errorf("whole superblock at %#x (usage %+v), want %#x with no growth", p, r.Usage(), ps[0])
	}
	if err := r.Deallocate(p, sb, s); err != nil {
		t.Fatal(err)
	}
	resReleaseAll(t, dev, r, s)
}

// TestArenaCrossStreamFree checks that a range freed on another stream is
// reused by its owner only after the owner's stream waits for the free,
// and is reused rather than left stranded while the arena grows.
func TestArenaCrossStreamFree(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	s1, s2 := resStream(t, dev), resStream(t, dev)
	const sb = 1 << 20
	r, err := mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{SuperblockSize: sb, LargeSize: sb})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := dev.NewEvent(false)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Destroy()
	for range 3 {
		p, err := r.Allocate(sb, s1)
		if err != nil {
			t.Fatal(err)
		}
		// The caller orders s2's use after the allocation on s1.
		if err := ev.Record(s1); err != nil {
			t.Fatal(err)
		}
		if err := s2.WaitEvent(ev); err != nil {
			t.Fatal(err)
		}
		release := dev.Hold(s2)
		if err := dev.MemsetD8Async(p, 1, sb, s2); err != nil {
			t.Fatal(err)
		}
		write := dev.LastOp(s2)
		if err := r.Deallocate(p, sb, s2); err != nil {
			t.Fatal(err)
		}
		q, err := r.Allocate(sb, s1)
		if err != nil {
			t.Fatal(err)
		}
		if q != p || r.Usage().Reserved != sb {
			t.Errorf("got %#x with %d bytes reserved, want the range freed on s2 (%#x) and no growth", q, r.Usage().Reserved, p)
		}
		if err := dev.MemsetD8Async(q, 2, sb, s1); err != nil {
			t.Fatal(err)
		}
		if !dev.HappensBefore(write, dev.LastOp(s1)) {
			t.Error("owner reused the range before the free on s2")
		}
		release()
		if err := r.Deallocate(q, sb, s1); err != nil {
			t.Fatal(err)
		}
	}
	resReleaseAll(t, dev, r, s1, s2)
}

// TestArenaWaitsUnderPressure fills a device that holds two superblocks;
// a range freed on a held stream is then reclaimed by making the owner
// wait on the free, not by failing.
func TestArenaWaitsUnderPressure(t *testing.T) {
	const sb = 2 << 20
	dev := resDevice(t, sim.Config{Capacity: 2 * sb})
	s1, s2 := resStream(t, dev), resStream(t, dev)
	r, err := mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{SuperblockSize: sb, LargeSize: sb})
	if err != nil {
		t.Fatal(err)
	}
	a, err := r.Allocate(sb, s1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Allocate(sb, s1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Allocate(sb, s1); !errors.Is(err, mr.ErrOutOfMemory) {
		t.Fatalf("third superblock on a two-superblock device: %v", err)
	}
	release := dev.Hold(s2)
	if err := dev.MemsetD8Async(a, 1, sb, s2); err != nil {
		t.Fatal(err)
	}
	write := dev.LastOp(s2)
	if err := r.Deallocate(a, sb, s2); err != nil {
		t.Fatal(err)
	}
	c, err := r.Allocate(sb, s1)
	if err != nil {
		t.Fatalf("allocate with a pending cross-stream free under pressure: %v", err)
	}
	if c != a {
		t.Fatalf("got %#x, want the range freed on s2 (%#x)", c, a)
	}
	if err := dev.MemsetD8Async(c, 2, sb, s1); err != nil {
		t.Fatal(err)
	}
	if !dev.HappensBefore(write, dev.LastOp(s1)) {
		t.Error("owner reused the range without waiting for s2's free")
	}
	release()
	for _, p := range []gpu.DevicePtr{b, c} {
		if err := r.Deallocate(p, sb, s1); err != nil {
			t.Fatal(err)
		}
	}
	resReleaseAll(t, dev, r, s1, s2)
}

// TestArenaGlobalSuperblocks checks an emptied superblock goes back to the
// global arena and another stream takes it after waiting on its last
// owner.
func TestArenaGlobalSuperblocks(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	s1, s2 := resStream(t, dev), resStream(t, dev)
	const sb = 1 << 20
	r, err := mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{SuperblockSize: sb, LargeSize: sb})
	if err != nil {
		t.Fatal(err)
	}
	keep, err := r.Allocate(1000, s1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Allocate(sb, s1) // a second superblock
	if err != nil {
		t.Fatal(err)
	}
	release := dev.Hold(s1)
	if err := dev.MemsetD8Async(p, 1, sb, s1); err != nil {
		t.Fatal(err)
	}
	write := dev.LastOp(s1)
	if err := r.Deallocate(p, sb, s1); err != nil { // empties it: back to global
		t.Fatal(err)
	}
	q, err := r.Allocate(sb, s2)
	if err != nil {
		t.Fatal(err)
	}
	if q != p || r.Usage().Reserved != 2*sb {
		t.Errorf("s2 got %#x (usage %+v), want the returned superblock %#x", q, r.Usage(), p)
	}
	if err := dev.MemsetD8Async(q, 2, sb, s2); err != nil {
		t.Fatal(err)
	}
	if !dev.HappensBefore(write, dev.LastOp(s2)) {
		t.Error("superblock taken from the global arena without waiting on its last owner")
	}
	release()
	if err := r.Deallocate(q, sb, s2); err != nil {
		t.Fatal(err)
	}
	if err := r.Deallocate(keep, 1000, s1); err != nil {
		t.Fatal(err)
	}
	resReleaseAll(t, dev, r, s1, s2)
}

func ExampleArena() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()

	r, err := mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{SuperblockSize: 4 << 20})
	if err != nil {
		panic(err)
	}
	p, _ := r.Allocate(1000, s)  // from s's arena
	q, _ := r.Allocate(8<<20, s) // larger than LargeSize: from the upstream
	fmt.Println(r.Usage().Reserved)
	r.Deallocate(p, 1000, s)
	r.Deallocate(q, 8<<20, s)
	r.Release()
	fmt.Println(r.Usage().Reserved)
	// Output:
	// 12582912
	// 0
}

func TestArenaClose(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	s := resStream(t, dev)
	r, err := mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{SuperblockSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	small, err := r.Allocate(1000, s)
	if err != nil {
		t.Fatal(err)
	}
	large, err := r.Allocate(2<<20, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err == nil {
		t.Fatal("Close with live allocations succeeded")
	}
	for _, a := range []struct {
		p gpu.DevicePtr
		n int
	}{{small, 1000}, {large, 2 << 20}} {
		if err := r.Deallocate(a.p, a.n, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Deallocate(large, 2<<20, s); !errors.Is(err, mr.ErrDoubleFree) {
		t.Errorf("double free of a large allocation: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if u := r.Usage(); u.Reserved != 0 {
		t.Errorf("after Close: %+v", u)
	}
}
