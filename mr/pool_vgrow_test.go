package mr_test

import (
	"context"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// TestPoolGrowsInPlace: over Virtual, a stream's requests come from one
// growable range: a growth commits only the granules a request lacks
// next to the free bytes before it, Release decommits the whole granules
// of a free block between live ones, and the statistics tell reserved
// address space, mapped and live bytes apart.
func TestPoolGrowsInPlace(t *testing.T) {
	const MiB = 1 << 20
	d, err := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	v := newVirtual(t, d, mr.VirtualOptions{})
	p, err := mr.NewPool(v, mr.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	check := func(step string, reserved, used uint64, growths, inPlace uint64, space uint64) {
		t.Helper()
		u, st := p.Usage(), p.Stats()
		if u.Reserved != reserved || u.Used != used || st.Growths != growths || st.InPlaceGrowths != inPlace || st.AddressSpace != space {
			t.Fatalf("%s: reserved %d used %d, %d growths, %d in place, address space %d; want %d %d %d %d %d",
				step, u.Reserved, u.Used, st.Growths, st.InPlaceGrowths, st.AddressSpace, reserved, used, growths, inPlace, space)
		}
	}
	a, err := p.Allocate(3*MiB, s)
	if err != nil {
		t.Fatal(err)
	}
	check("a range for the first request", 4*MiB, 3*MiB, 1, 0, 1<<30)
	b, err := p.Allocate(3*MiB, s)
	if err != nil {
		t.Fatal(err)
	}
	if b != a+3*MiB {
		t.Fatalf("second block at %#x, want right after the first, %#x", uint64(b), uint64(a)+3*MiB)
	}
	check("a growth of one granule", 6*MiB, 6*MiB, 1, 1, 1<<30)
	c, err := p.Allocate(8*MiB, s)
	if err != nil {
		t.Fatal(err)
	}
	check("a growth of four granules", 14*MiB, 14*MiB, 1, 2, 1<<30)
	if err := p.Deallocate(b, 3*MiB, s); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	// b's bytes [3, 6) MiB: the granule [4, 6) is whole, [3, 4) shares
	// one with a.
	check("a hole decommitted", 12*MiB, 11*MiB, 1, 2, 1<<30)
	if st := p.Stats(); st.Decommits != 1 {
		t.Fatalf("%d decommits, want 1", st.Decommits)
	}
	if err := v.ReleaseContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := v.Stats(); st.Mapped != 12*MiB || st.Pending != 0 || st.Growable != 1 {
		t.Fatalf("Virtual after the decommit: %+v", st)
	}
	// The hole is committed again for a request that needs it.
	b, err = p.Allocate(3*MiB, s)
	if err != nil {
		t.Fatal(err)
	}
	if b != a+3*MiB {
		t.Fatalf("block in the hole at %#x, want %#x", uint64(b), uint64(a)+3*MiB)
	}
	check("the hole committed again", 14*MiB, 14*MiB, 1, 3, 1<<30)
	for _, x := range []struct {
		p    gpu.DevicePtr
		size int
	}{{a, 3 * MiB}, {b, 3 * MiB}, {c, 8 * MiB}} {
		if err := p.Deallocate(x.p, x.size, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	check("everything freed and released", 0, 0, 1, 3, 0)
	if err := v.ReleaseContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := v.Stats(); st.Mapped != 0 || st.Growable != 0 || st.Live != 0 {
		t.Fatalf("Virtual after the release: %+v", st)
	}
}

// TestPoolLayoutGrowable: a growable chunk is laid out as one chunk per
// run of mapped memory, whose blocks tile it.
func TestPoolLayoutGrowable(t *testing.T) {
	const MiB = 1 << 20
	d, err := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	v := newVirtual(t, d, mr.VirtualOptions{})
	p, err := mr.NewPool(v, mr.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	var ptrs []gpu.DevicePtr
	for range 3 {
		x, err := p.Allocate(4*MiB, s)
		if err != nil {
			t.Fatal(err)
		}
		ptrs = append(ptrs, x)
	}
	// Free the middle block and decommit it: two runs of 4 MiB.
	if err := p.Deallocate(ptrs[1], 4*MiB, s); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	l := p.Layout()
	if len(l.Chunks) != 2 || l.Reserved() != 8*MiB || l.Reserved() != p.Usage().Reserved {
		t.Fatalf("layout %+v, reserved %d, want two runs of 4 MiB", l.Chunks, l.Reserved())
	}
	for i, c := range l.Chunks {
		at := c.Base
		for _, b := range c.Blocks {
			if b.Ptr != at {
				t.Fatalf("run %d: block at %#x, want %#x", i, uint64(b.Ptr), uint64(at))
			}
			at += gpu.DevicePtr(b.Size)
		}
		if c.Base != ptrs[2*i] || at != c.Base+gpu.DevicePtr(c.Size) || c.Size != 4*MiB {
			t.Fatalf("run %d: [%#x, +%d), blocks to %#x", i, uint64(c.Base), c.Size, uint64(at))
		}
	}
	for _, x := range []gpu.DevicePtr{ptrs[0], ptrs[2]} {
		if err := p.Deallocate(x, 4*MiB, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	if l := p.Layout(); len(l.Chunks) != 0 {
		t.Fatalf("after the release: %+v", l.Chunks)
	}
}

// TestPoolCommitBlocked: a stream whose range's memory went to another
// stream's commit while the decommit's work still runs (ErrGrowBlocked
// from Virtual) grows elsewhere in its own range, instead of starting a
// new range or falling back to a chunk of fixed size: just past the
// refused addresses, and after a second refusal above every address the
// range ever committed.
func TestPoolCommitBlocked(t *testing.T) {
	const MiB = 1 << 20
	for _, tc := range []struct {
		name string
		// first: ss[0]'s block, freed; other: ss[1]'s block, which takes
		// its decommitted memory; again: ss[0]'s next request
		first, other, again int
		at                  gpu.DevicePtr // where again lands, from first
	}{
		{"one refusal", 6 * MiB, 4 * MiB, 6 * MiB, 6 * MiB},
		{"two refusals", 12 * MiB, 12 * MiB, 4 * MiB, 12 * MiB},
		{"a long run refused", 24 * MiB, 24 * MiB, 2 * MiB, 24 * MiB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev, v, ss := newSimVirtual(t, 32*MiB)
			p := newPool(t, v, mr.PoolOptions{})
			a, err := p.Allocate(tc.first, ss[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Deallocate(a, tc.first, ss[0]); err != nil {
				t.Fatal(err)
			}
			// ss[0]'s work is still running when the pool decommits its
			// free granules for ss[1]'s request, whose commit takes their
			// memory.
			release := dev.Hold(ss[0])
			defer release()
			b, err := p.Allocate(tc.other, ss[1])
			if err != nil {
				t.Fatal(err)
			}
			if st := v.Stats(); st.Handoffs == 0 {
				t.Fatalf("no handoff of the decommitted memory: %+v", st)
			}
			before := p.Stats()
			c, err := p.Allocate(tc.again, ss[0])
			if err != nil {
				t.Fatal(err)
			}
			if c != a+tc.at {
				t.Errorf("block at first+%#x, want first+%#x", uint64(c-a), uint64(tc.at))
			}
			if st := p.Stats(); st.Growths != before.Growths || st.InPlaceGrowths != before.InPlaceGrowths+1 || st.AddressSpace != before.AddressSpace {
				t.Errorf("stats %+v after the refused commit, want one growth in place more than %+v", st, before)
			}
			release()
			for _, x := range []struct {
				ptr  gpu.DevicePtr
				size int
				s    gpu.Stream
			}{{b, tc.other, ss[1]}, {c, tc.again, ss[0]}} {
				if err := p.Deallocate(x.ptr, x.size, x.s); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Release(); err != nil {
				t.Fatal(err)
			}
			if u := p.Usage(); u.Reserved != 0 || u.Used != 0 {
				t.Errorf("after the frees and a release: %+v", u)
			}
		})
	}
}

// TestPoolWaitForDecommits: over a Virtual with WaitForDecommits, a
// stream whose decommitted memory went to another stream's commit places
// its next block where it would had the decommit's work completed (at its
// old addresses, the lowest), waiting for that work, where without the
// option it goes past the refused addresses (TestPoolCommitBlocked): the
// layout follows from the requests alone.
func TestPoolWaitForDecommits(t *testing.T) {
	const MiB = 1 << 20
	for _, held := range []bool{false, true} {
		t.Run(map[bool]string{false: "completed", true: "held"}[held], func(t *testing.T) {
			dev, v, ss := newSimVirtualOpts(t, 32*MiB, mr.VirtualOptions{WaitForDecommits: true})
			p := newPool(t, v, mr.PoolOptions{})
			a, err := p.Allocate(6*MiB, ss[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Deallocate(a, 6*MiB, ss[0]); err != nil {
				t.Fatal(err)
			}
			release := func() {}
			if held {
				release = dev.Hold(ss[0])
			} else if err := ss[0].Synchronize(); err != nil {
				t.Fatal(err)
			}
			defer release()
			b, err := p.Allocate(4*MiB, ss[1])
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				ptr gpu.DevicePtr
				err error
			}
			done := make(chan result, 1)
			go func() {
				c, err := p.Allocate(6*MiB, ss[0])
				done <- result{c, err}
			}()
			if held {
				select {
				case r := <-done:
					t.Fatalf("allocation at addresses still mapped for ss[1] returned (%#x, %v) while the decommit's work was held", uint64(r.ptr), r.err)
				case <-time.After(50 * time.Millisecond):
				}
				release()
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.ptr != a {
				t.Errorf("block at first+%#x, want first", uint64(r.ptr-a))
			}
			if st := v.Stats(); held && (st.HostWaits == 0 || st.Handoffs == 0) {
				t.Errorf("held: %+v, want a handoff and a host wait", st)
			}
			for _, x := range []struct {
				ptr  gpu.DevicePtr
				size int
				s    gpu.Stream
			}{{b, 4 * MiB, ss[1]}, {r.ptr, 6 * MiB, ss[0]}} {
				if err := p.Deallocate(x.ptr, x.size, x.s); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Release(); err != nil {
				t.Fatal(err)
			}
			if u := p.Usage(); u.Reserved != 0 || u.Used != 0 {
				t.Errorf("after the frees and a release: %+v", u)
			}
		})
	}
}
