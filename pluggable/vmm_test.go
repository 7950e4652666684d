package pluggable

import (
	"bytes"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// TestPoolOverVirtual: with upstream=vmm the pool sits on a Virtual, and
// Stats tells apart what it maps (Reserved: device memory) from the
// address space it keeps (AddressSpace: no memory). Reserved follows the
// live blocks in whole granules, Release unmaps everything, and the peaks
// reset.
func TestPoolOverVirtual(t *testing.T) {
	a, errw := newSim(t, "pool,upstream=vmm")
	s1, err := a.SimNewStream(0)
	if err != nil {
		t.Fatal(err)
	}
	d := a.devs[0].Load()
	if d.virtual == nil || d.vmmFallback != "" {
		t.Fatalf("upstream=vmm built no Virtual (fallback %q)", d.vmmFallback)
	}
	gran := d.virtual.Stats().Granularity
	sizes := []uint64{100 << 20, 37<<20 + 5, 1 << 10, 300 << 20}
	var ptrs []uintptr
	var live uint64
	for i, size := range sizes {
		s := []uintptr{0, s1}[i%2]
		p := a.Alloc(size, 0, s)
		if p == 0 || p%mr.Alignment != 0 {
			t.Fatalf("Alloc(%d) = %#x: %s", size, p, a.LastError())
		}
		ptrs = append(ptrs, p)
		live += size
	}
	st := stats(t, a, 0)
	vs := d.virtual.Stats()
	if st.Reserved != vs.Mapped || st.PeakReserved != vs.PeakMapped {
		t.Fatalf("reserved %d (peak %d); the Virtual maps %d (peak %d)", st.Reserved, st.PeakReserved, vs.Mapped, vs.PeakMapped)
	}
	if st.Live != live || st.Reserved < live || st.Reserved%gran != 0 {
		t.Fatalf("live %d (want %d), reserved %d: want whole granules of %d covering the live bytes", st.Live, live, st.Reserved, gran)
	}
	// Each stream's blocks are mapped in place: at most a granule per
	// block and the small chunk of the 1 KiB request above the live bytes.
	if slack := st.Reserved - live; slack > uint64(len(sizes))*gran+2<<20 {
		t.Fatalf("reserved %d for %d live: %d bytes more than the blocks' granules", st.Reserved, live, slack)
	}
	if st.AddressSpace != vs.Reserved || st.AddressSpace <= st.Reserved {
		t.Fatalf("address space %d (the Virtual reserves %d), reserved %d", st.AddressSpace, vs.Reserved, st.Reserved)
	}
	if st.VMMFallback || st.DeviceAllocs == 0 {
		t.Fatalf("stats %+v: want no fallback and the pool's growths counted", st)
	}
	for i, p := range ptrs {
		if err := a.Free(p, sizes[i], 0, []uintptr{0, s1}[i%2]); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Release(-1); err != nil {
		t.Fatal(err)
	}
	st = stats(t, a, 0)
	if st.Reserved != 0 || st.Live != 0 || st.LiveAllocs != 0 || st.DeviceFrees == 0 || st.PeakReserved < live {
		t.Fatalf("after freeing everything and Release: %+v", st)
	}
	if err := a.ResetPeaks(0); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, a, 0); st.PeakReserved != 0 || st.PeakLive != 0 {
		t.Fatalf("after ResetPeaks: %+v", st)
	}
	if err := a.SimDestroyStream(0, s1); err != nil {
		t.Fatal(err)
	}
	if errw.Len() != 0 {
		t.Fatalf("reports on standard error: %s", errw)
	}
}

// TestPoolOverVirtualChunks: with in_place=false the pool cuts chunks
// from Virtual's plain allocations, one physical allocation each, and
// never grows in place (the counting adaptor between them does not
// implement mr.Grower). Reserved is what the Virtual maps, frees still
// running included; DeviceAllocs and DeviceFrees are the pool's chunks.
func TestPoolOverVirtualChunks(t *testing.T) {
	for _, conf := range []string{"pool,upstream=vmm,in_place=false", "pool,upstream=vmm,in_place=false,wait_frees"} {
		t.Run(conf, func(t *testing.T) {
			a, errw := newSim(t, conf)
			s1, err := a.SimNewStream(0)
			if err != nil {
				t.Fatal(err)
			}
			d := a.devs[0].Load()
			if d.virtual == nil || d.vmmFallback != "" || d.counted == nil {
				t.Fatalf("in_place=false: Virtual %v, counted %v, fallback %q", d.virtual != nil, d.counted != nil, d.vmmFallback)
			}
			if _, isGrower := mr.Resource(d.counted).(mr.Grower); isGrower {
				t.Fatal("the pool's upstream implements mr.Grower: it would grow in place")
			}
			sizes := []uint64{100 << 20, 37<<20 + 5, 1 << 10, 300 << 20}
			var ptrs []uintptr
			var live uint64
			for i, size := range sizes {
				p := a.Alloc(size, 0, []uintptr{0, s1}[i%2])
				if p == 0 || p%mr.Alignment != 0 {
					t.Fatalf("Alloc(%d) = %#x: %s", size, p, a.LastError())
				}
				ptrs = append(ptrs, p)
				live += size
			}
			st := stats(t, a, 0)
			vs, ps := d.virtual.Stats(), d.pool.Stats()
			if vs.Growable != 0 || ps.InPlaceGrowths != 0 || ps.Growths == 0 {
				t.Fatalf("virtual %+v, pool %+v: want chunks, no growable range", vs, ps)
			}
			if st.Reserved != vs.Mapped || st.PeakReserved != vs.PeakMapped || st.Live != live || st.Reserved < live {
				t.Fatalf("reserved %d (peak %d), live %d; the Virtual maps %d (peak %d), the trace %d live",
					st.Reserved, st.PeakReserved, st.Live, vs.Mapped, vs.PeakMapped, live)
			}
			if st.DeviceAllocs != ps.Growths || vs.Live != uint64(d.pool.Usage().Reserved) || st.AddressSpace != vs.Reserved || st.VMMFallback {
				t.Fatalf("stats %+v, virtual %+v, pool %+v: want the pool's chunks counted and the address space reported", st, vs, ps)
			}
			for i, p := range ptrs {
				if err := a.Free(p, sizes[i], 0, []uintptr{0, s1}[i%2]); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Release(-1); err != nil {
				t.Fatal(err)
			}
			if st := stats(t, a, 0); st.Reserved != 0 || st.Live != 0 || st.DeviceFrees != st.DeviceAllocs {
				t.Fatalf("after freeing everything and Release: %+v", st)
			}
			if err := a.SimDestroyStream(0, s1); err != nil {
				t.Fatal(err)
			}
			if errw.Len() != 0 {
				t.Fatalf("reports on standard error: %s", errw)
			}
		})
	}
}

// TestPoolOverVirtualOutOfMemory: a request the device cannot map returns
// 0, counts an OOM and leaves the figures as they were.
func TestPoolOverVirtualOutOfMemory(t *testing.T) {
	a, _ := newSim(t, "pool,upstream=vmm,sim_capacity=64MiB")
	p := a.Alloc(8<<20, 0, 0)
	if p == 0 {
		t.Fatal(a.LastError())
	}
	before := stats(t, a, 0)
	if q := a.Alloc(128<<20, 0, 0); q != 0 {
		t.Fatalf("Alloc(128 MiB) on a 64 MiB device = %#x", q)
	}
	after := stats(t, a, 0)
	if after.OOMs != 1 || after.Live != before.Live || after.Allocs != before.Allocs {
		t.Fatalf("before %+v, after %+v: want one OOM and nothing else changed", before, after)
	}
	if err := a.Free(p, 8<<20, 0, 0); err != nil {
		t.Fatal(err)
	}
}

// noVMM is a device whose driver has no virtual memory management: it
// hides the simulator's gpu.VirtualMemory.
type noVMM struct{ gpu.Device }

// TestVMMFallback: where the driver has no virtual memory management,
// upstream=vmm builds the pool over cuMemAlloc, says so once on standard
// error and in Stats, and serves as upstream=direct does.
func TestVMMFallback(t *testing.T) {
	a := New()
	var errw bytes.Buffer
	a.stderr = &errw
	a.vmmDevice = func(d gpu.Device) gpu.Device { return noVMM{d} }
	if err := a.Configure("pool,upstream=vmm,backend=sim"); err != nil {
		t.Fatal(err)
	}
	p := a.Alloc(3<<20, 0, 0)
	if p == 0 {
		t.Fatal(a.LastError())
	}
	st := stats(t, a, 0)
	if !st.VMMFallback || st.AddressSpace != 0 || st.Live != 3<<20 || st.Reserved < st.Live || st.DeviceAllocs != 1 {
		t.Fatalf("stats %+v: want the fallback reported and the chunked pool's figures", st)
	}
	if got := errw.String(); !strings.Contains(got, "device 0: upstream=vmm unavailable, the pool is over cuMemAlloc") ||
		!strings.Contains(got, gpu.ErrNotSupported.Error()) || strings.Count(got, "\n") != 1 {
		t.Fatalf("standard error %q: want one line that names the fallback and its cause", got)
	}
	if err := a.Free(p, 3<<20, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(-1); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, a, 0); st.Reserved != 0 || !st.VMMFallback {
		t.Fatalf("after Release: %+v", st)
	}
	// Without the option nothing falls back and nothing is reported.
	b, errb := newSim(t, "pool")
	if q := b.Alloc(1<<20, 0, 0); q == 0 || stats(t, b, 0).VMMFallback || errb.Len() != 0 {
		t.Fatalf("upstream=direct: %#x, %+v, %q", q, stats(t, b, 0), errb)
	}
}

// TestVirtualOptionsFromConfig: the vmm options of the configuration
// string reach the Virtual under each device's pool.
func TestVirtualOptionsFromConfig(t *testing.T) {
	for _, tc := range []struct {
		conf string
		want func(mr.VirtualOptions) bool
	}{
		{"pool,upstream=vmm", func(o mr.VirtualOptions) bool {
			return o.PiecesPerCommit == mr.DefaultVirtualPiecesPerCommit && !o.WaitForDecommits && o.DecommitWaitLimit == 0
		}},
		{"pool,upstream=vmm,pieces=3", func(o mr.VirtualOptions) bool {
			return o.PiecesPerCommit == 3 && !o.WaitForDecommits
		}},
		{"pool,upstream=vmm,wait_decommits,pieces=2", func(o mr.VirtualOptions) bool {
			return o.PiecesPerCommit == 2 && o.WaitForDecommits && o.DecommitWaitLimit == DecommitWaitLimit
		}},
		{"pool,upstream=vmm,in_place=false", func(o mr.VirtualOptions) bool {
			return !o.WaitForFrees && !o.WaitForDecommits
		}},
		{"pool,upstream=vmm,in_place=false,wait_frees", func(o mr.VirtualOptions) bool {
			return o.WaitForFrees && !o.WaitForDecommits
		}},
	} {
		a, _ := newSim(t, tc.conf)
		if _, err := a.SimNewStream(0); err != nil {
			t.Fatal(err)
		}
		d := a.devs[0].Load()
		if d == nil || d.virtual == nil {
			t.Fatalf("%s: no Virtual under the pool", tc.conf)
		}
		if o := d.virtual.Options(); !tc.want(o) {
			t.Errorf("%s: the Virtual's options %+v", tc.conf, o)
		}
	}
}
