package pluggable

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/google/pprof/profile"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/trace"
)

// newSim returns an allocator on a simulated GPU with conf's options, and
// the buffer its bad-free reports go to.
func newSim(t *testing.T, conf string) (*Allocator, *bytes.Buffer) {
	t.Helper()
	a := New()
	var errw bytes.Buffer
	a.stderr = &errw
	if conf == "" {
		conf = "pool"
	}
	if err := a.Configure(conf + ",backend=sim"); err != nil {
		t.Fatal(err)
	}
	return a, &errw
}

func stats(t *testing.T, a *Allocator, dev int) Stats {
	t.Helper()
	st, err := a.Stats(dev)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestAllocFreeOnRawStreams: allocations on the legacy stream, a raw
// stream of another library and the per-thread stream, freed on their
// own stream and across streams; the figures follow exactly.
func TestAllocFreeOnRawStreams(t *testing.T) {
	for _, kind := range []string{"pool", "pool,upstream=async", "pool,upstream=vmm", "async", "async,pool=own", "async,pool=current"} {
		t.Run(kind, func(t *testing.T) {
			a, _ := newSim(t, kind)
			s1, err := a.SimNewStream(0)
			if err != nil {
				t.Fatal(err)
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var ptrs []uintptr
			for i, s := range []uintptr{gpu.StreamLegacy, s1, gpu.StreamPerThread} {
				p := a.Alloc(uint64(1000*(i+1)), 0, s)
				if p == 0 || p%mr.Alignment != 0 {
					t.Fatalf("Alloc on stream %#x = %#x: %s", s, p, a.LastError())
				}
				ptrs = append(ptrs, p)
			}
			st := stats(t, a, 0)
			if st.Live != 6000 || st.PeakLive != 6000 || st.Allocs != 3 || st.LiveAllocs != 3 || st.Reserved == 0 || st.PeakReserved < st.Reserved {
				t.Fatalf("after three allocations: %+v", st)
			}
			// The first on its own stream, the others across streams.
			if err := errors.Join(a.Free(ptrs[0], 1000, 0, gpu.StreamLegacy), a.Free(ptrs[1], 2000, 0, gpu.StreamLegacy),
				a.Free(ptrs[2], 3000, 0, s1)); err != nil {
				t.Fatal(err)
			}
			st = stats(t, a, 0)
			if st.Live != 0 || st.PeakLive != 6000 || st.Frees != 3 || st.LiveAllocs != 0 || st.BadFrees != 0 || st.Errors != 0 {
				t.Fatalf("after the frees: %+v", st)
			}
			if err := a.Release(-1); err != nil {
				t.Fatal(err)
			}
			st = stats(t, a, 0)
			if strings.HasPrefix(kind, "pool") {
				if st.Reserved != 0 || st.DeviceAllocs == 0 || st.DeviceFrees != st.DeviceAllocs {
					t.Fatalf("after Release: %+v; want nothing reserved, every growth given back", st)
				}
			} else if st.DeviceAllocs != 0 || st.DeviceFrees != 0 {
				t.Fatalf("async counts device calls it cannot see: %+v", st)
			}
			if err := a.ResetPeaks(0); err != nil {
				t.Fatal(err)
			}
			if st := stats(t, a, 0); st.PeakLive != 0 {
				t.Fatalf("after ResetPeaks: peak live %d", st.PeakLive)
			}
			if err := a.SimDestroyStream(0, s1); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestOutOfMemory: a request the device cannot hold returns 0 and counts
// an OOM, and changes nothing else.
func TestOutOfMemory(t *testing.T) {
	a, _ := newSim(t, "pool,sim_capacity=64MiB")
	p := a.Alloc(1<<20, 0, 0)
	if p == 0 {
		t.Fatal(a.LastError())
	}
	before := stats(t, a, 0)
	for _, size := range []uint64{1 << 30, 1 << 63, ^uint64(0)} {
		if q := a.Alloc(size, 0, 0); q != 0 {
			t.Fatalf("Alloc(%d) on a 64 MiB device = %#x", size, q)
		}
	}
	after := stats(t, a, 0)
	if after.OOMs != 3 || after.Errors != 0 || after.Live != before.Live || after.Allocs != before.Allocs {
		t.Fatalf("after three refused requests: %+v (before %+v)", after, before)
	}
	if msg := strings.ToLower(a.LastError()); !strings.Contains(msg, "out of memory") && !strings.Contains(msg, "out_of_memory") {
		t.Fatalf("LastError %q", a.LastError())
	}
	if err := a.Free(p, 1<<20, 0, 0); err != nil {
		t.Fatal(err)
	}
}

// TestBadFrees: frees the resource refuses are counted, reported and
// change nothing; the host gets an error, never a crash.
func TestBadFrees(t *testing.T) {
	a, errw := newSim(t, "")
	p := a.Alloc(4096, 0, 0)
	if p == 0 {
		t.Fatal(a.LastError())
	}
	for i, c := range []struct {
		ptr  uintptr
		size uint64
		dev  int
		want error
	}{
		{p + 256, 4096, 0, mr.ErrUnknownPointer},
		{0xdead000, 16, 0, mr.ErrUnknownPointer},
		{p, 8192, 0, mr.ErrSizeMismatch},
		{p, 1 << 63, 0, mr.ErrSizeMismatch},
		{p, 4096, 3, ErrBadDevice},
		{p, 4096, -1, ErrBadDevice},
	} {
		err := a.Free(c.ptr, c.size, c.dev, 0)
		if !errors.Is(err, c.want) {
			t.Errorf("bad free %d (%#x, %d, device %d): %v, want %v", i, c.ptr, c.size, c.dev, err, c.want)
		}
	}
	st := stats(t, a, 0)
	if st.BadFrees != 4 || st.Errors != 2 || st.Live != 4096 || st.Frees != 0 {
		t.Fatalf("after 4 bad frees on device 0 and 2 on bad devices: %+v", st)
	}
	if err := a.Free(p, 4096, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(p, 4096, 0, 0); !errors.Is(err, mr.ErrDoubleFree) && !errors.Is(err, mr.ErrUnknownPointer) {
		t.Fatalf("double free: %v", err)
	}
	if got := strings.Count(errw.String(), "streamalloc: bad free"); got != 7 {
		t.Fatalf("%d bad frees reported on stderr, want 7:\n%s", got, errw.String())
	}
	if st := stats(t, a, 0); st.BadFrees != 5 || st.Live != 0 || st.Frees != 1 {
		t.Fatalf("after the double free: %+v", st)
	}
}

// TestNoStreamNoSize: CuPy's interface (no stream, no size on free).
func TestNoStreamNoSize(t *testing.T) {
	a, _ := newSim(t, "")
	p := a.AllocNoStream(3000, 0)
	q := a.AllocNoStream(5000, 0)
	if p == 0 || q == 0 {
		t.Fatal(a.LastError())
	}
	if err := a.FreeNoSize(p, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.FreeNoSize(p, 0); !errors.Is(err, mr.ErrUnknownPointer) {
		t.Fatalf("second free: %v", err)
	}
	if err := a.FreeNoSize(q+8, 0); !errors.Is(err, mr.ErrUnknownPointer) {
		t.Fatalf("interior pointer: %v", err)
	}
	if err := a.FreeNoSize(q, 0); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, a, 0); st.Live != 0 || st.Allocs != 2 || st.Frees != 2 || st.BadFrees != 2 {
		t.Fatalf("%+v", st)
	}
	if p := a.AllocNoStream(0, 0); p != 0 {
		t.Fatal("zero bytes gave a pointer")
	}
	if err := a.FreeNoSize(0, 0); err != nil {
		t.Fatalf("free of NULL: %v", err)
	}
}

// TestConfigureAndErrors: the configuration is fixed at first use, read
// from the environment when not set, and a bad one is refused.
func TestConfigureAndErrors(t *testing.T) {
	t.Setenv(ConfigEnv, "pool,backend=sim,sim_capacity=128MiB,release_threshold=1M")
	a := New()
	if err := a.Configure("pool,bogus=1"); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad configuration: %v", err)
	}
	c, err := a.Config()
	if err != nil || c.SimCapacity != 128<<20 || c.ReleaseThreshold != 1<<20 {
		t.Fatalf("configuration from the environment: %+v, %v", c, err)
	}
	if p := a.Alloc(256, 0, 0); p == 0 {
		t.Fatal(a.LastError())
	}
	if err := a.Configure("async,backend=sim"); !errors.Is(err, ErrStarted) {
		t.Fatalf("Configure after first use: %v", err)
	}
	if p := a.Alloc(256, 1, 0); p != 0 {
		t.Fatal("allocation on a device the backend does not have")
	}
	if p := a.Alloc(256, 0, 0x12345); p != 0 {
		t.Fatal("allocation on a stream that does not exist")
	}
	if _, err := a.Stats(MaxDevices); !errors.Is(err, ErrBadDevice) {
		t.Fatalf("Stats of a bad ordinal: %v", err)
	}
	if st := stats(t, a, 0); st.Errors != 2 || st.Allocs != 1 {
		t.Fatalf("%+v", st)
	}
	if st := stats(t, a, 5); st != (Stats{Errors: 2}) {
		t.Fatalf("a device not in use: %+v", st)
	}

	b := New()
	t.Setenv(ConfigEnv, "pool,nonsense")
	if p := b.Alloc(256, 0, 0); p != 0 || !strings.Contains(b.LastError(), ConfigEnv) {
		t.Fatalf("bad environment: %#x, %q", p, b.LastError())
	}
}

// panicky is a resource that panics, standing for a bug below the
// allocator.
type panicky struct{ mr.Resource }

func (panicky) Allocate(int, gpu.Stream) (gpu.DevicePtr, error) { panic("allocate") }
func (panicky) Deallocate(gpu.DevicePtr, int, gpu.Stream) error { panic("deallocate") }

// TestPanicsAreRecovered: a panic below never leaves the allocator; it
// is counted and the call fails like any error.
func TestPanicsAreRecovered(t *testing.T) {
	a, _ := newSim(t, "")
	a.wrap = func(r mr.Resource) mr.Resource { return panicky{r} }
	if p := a.Alloc(256, 0, 0); p != 0 {
		t.Fatal("a panicking allocation returned a pointer")
	}
	if p := a.AllocNoStream(256, 0); p != 0 {
		t.Fatal("a panicking allocation returned a pointer")
	}
	if err := a.Free(0x1000, 256, 0, 0); !errors.Is(err, ErrPanic) {
		t.Fatalf("panicking free: %v", err)
	}
	if st := stats(t, a, 0); st.Errors != 3 || a.panics.Load() != 3 || st.Allocs != 0 {
		t.Fatalf("%+v, %d panics", st, a.panics.Load())
	}
	if !strings.Contains(a.LastError(), "recovered panic") {
		t.Fatalf("LastError %q", a.LastError())
	}
}

// TestHistoryAndProfile: the log option writes every allocation and free
// as RMM CSV; the track option gives a pprof profile of live memory.
func TestHistoryAndProfile(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "history.csv")
	a, _ := newSim(t, "pool,log="+log+",track")
	p := a.Alloc(1<<20, 0, 0)
	q := a.Alloc(3<<20, 0, 0)
	if p == 0 || q == 0 {
		t.Fatal(a.LastError())
	}
	if err := a.Free(p, 1<<20, 0, 0); err != nil {
		t.Fatal(err)
	}
	prof := filepath.Join(dir, "live.pb.gz")
	if err := a.WriteProfile(prof); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(prof)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pp, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	var inuse int64
	for _, s := range pp.Sample {
		inuse += s.Value[len(s.Value)-1]
	}
	if inuse != 3<<20 {
		t.Fatalf("profile: %d bytes in use, want %d", inuse, 3<<20)
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	lf, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	r := trace.NewCSVReader(lf, log)
	var ops []string
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, ev.Op.String())
	}
	if got := strings.Join(ops, " "); got != "allocate allocate free" {
		t.Fatalf("history: %s", got)
	}

	b, _ := newSim(t, "")
	if err := b.WriteProfile(filepath.Join(dir, "x")); !errors.Is(err, ErrNotTracking) {
		t.Fatalf("profile without track: %v", err)
	}
}

// TestConcurrentHosts: host threads, each on its own stream, allocate and
// free at once; the figures add up.
func TestConcurrentHosts(t *testing.T) {
	a, _ := newSim(t, "")
	const workers, iters = 8, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := a.SimNewStream(0)
			if err != nil {
				t.Error(err)
				return
			}
			for i := range iters {
				size := uint64(256 * (1 + (w*iters+i)%64))
				p := a.Alloc(size, 0, s)
				if p == 0 {
					t.Error(a.LastError())
					return
				}
				if err := a.Free(p, size, 0, s); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if st := stats(t, a, 0); st.Allocs != workers*iters || st.Frees != workers*iters || st.Live != 0 || st.PeakLive == 0 {
		t.Fatalf("%+v", st)
	}
}

// TestAllocFreeAllocatesNothing: an allocate/free pair through the entry
// points the C ABI calls allocates no Go memory, once the stream and the
// pool's chunk exist, for every pool configuration, on the legacy stream,
// a raw stream of another library and the per-thread default stream, and
// through CuPy's interface. A Go allocation per call would make the
// garbage collector run inside the host process, where the host's threads
// that call in would assist it or wait for it. (Async is not listed: the
// simulator's model of the driver's pool allocates; the binding's hot
// calls are pinned allocation-free in cuda and gpu/cudagpu.)
//
// The test's goroutine is locked to its OS thread, as a C caller is: the
// per-thread default stream is the calling thread's, so a goroutine that
// moved to another thread between two pairs would reach another stream
// (a new adoption, a new pool stream) and measure that instead.
func TestAllocFreeAllocatesNothing(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, kind := range []string{"pool", "pool,upstream=async", "pool,upstream=vmm", "pool,split_big=false", "pool,release_threshold=1GiB"} {
		a, _ := newSim(t, kind)
		raw, err := a.SimNewStream(0)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []uintptr{0, raw, 2} {
			for _, size := range []uint64{512, 1 << 20, 64 << 20} {
				pair := func() {
					p := a.Alloc(size, 0, s)
					if p == 0 {
						t.Fatalf("%s: alloc %d on %#x: %s", kind, size, s, a.LastError())
					}
					if err := a.Free(p, size, 0, s); err != nil {
						t.Fatalf("%s: free: %v", kind, err)
					}
				}
				pair() // adopt the stream, grow the pool
				if n := testing.AllocsPerRun(100, pair); n != 0 {
					t.Errorf("%s: pair of %d bytes on stream %#x: %v Go allocations, want 0", kind, size, s, n)
				}
			}
		}
		pair := func() {
			p := a.AllocNoStream(1<<20, 0)
			if p == 0 {
				t.Fatalf("%s: AllocNoStream: %s", kind, a.LastError())
			}
			if err := a.FreeNoSize(p, 0); err != nil {
				t.Fatalf("%s: FreeNoSize: %v", kind, err)
			}
		}
		pair()
		if n := testing.AllocsPerRun(100, pair); n != 0 {
			t.Errorf("%s: CuPy's pair: %v Go allocations, want 0", kind, n)
		}
	}
}

// streamLog is a resource that records the stream of each call.
type streamLog struct {
	mr.Resource
	streams []gpu.Stream
}

func (r *streamLog) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	r.streams = append(r.streams, s)
	return r.Resource.Allocate(size, s)
}

func (r *streamLog) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	r.streams = append(r.streams, s)
	return r.Resource.Deallocate(p, size, s)
}

// TestStreamsAsAdopted: every call reaches the resource on the stream the
// device's adoption gives for its handle: the legacy stream, which the
// allocator keeps once adopted, for handle 0 and for CuPy's calls, and
// the adopted wrapper for a raw handle of another library; a handle the
// device refuses fails as the adoption does, and counts.
func TestStreamsAsAdopted(t *testing.T) {
	a, _ := newSim(t, "")
	var rec *streamLog
	a.wrap = func(r mr.Resource) mr.Resource { rec = &streamLog{Resource: r}; return rec }
	raw, err := a.SimNewStream(0)
	if err != nil {
		t.Fatal(err)
	}
	p := a.Alloc(256, 0, gpu.StreamLegacy)
	q := a.Alloc(512, 0, raw)
	c := a.AllocNoStream(1024, 0)
	if p == 0 || q == 0 || c == 0 {
		t.Fatalf("allocations %#x %#x %#x: %s", p, q, c, a.LastError())
	}
	if err := errors.Join(a.Free(p, 256, 0, gpu.StreamLegacy), a.Free(q, 512, 0, raw), a.FreeNoSize(c, 0)); err != nil {
		t.Fatal(err)
	}
	d, err := a.device(0)
	if err != nil {
		t.Fatal(err)
	}
	legacy, err := d.dev.AdoptStream(gpu.StreamLegacy)
	if err != nil {
		t.Fatal(err)
	}
	other, err := d.dev.AdoptStream(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !d.hasLegacy.Load() || d.legacy != legacy {
		t.Fatalf("kept legacy stream %v, want the adopted %v", d.legacy, legacy)
	}
	want := []gpu.Stream{legacy, other, legacy, legacy, other, legacy}
	if len(rec.streams) != len(want) {
		t.Fatalf("%d calls reached the resource, want %d", len(rec.streams), len(want))
	}
	for i, s := range rec.streams {
		if s != want[i] {
			t.Errorf("call %d on stream %v, want %v", i, s, want[i])
		}
	}
	// A handle the simulator does not know: refused by the adoption.
	const bogus = 0xdead0
	_, wantErr := d.dev.AdoptStream(bogus)
	if !errors.Is(wantErr, gpu.ErrInvalidHandle) {
		t.Fatalf("AdoptStream(%#x): %v", bogus, wantErr)
	}
	if p := a.Alloc(256, 0, bogus); p != 0 || !strings.Contains(a.LastError(), wantErr.Error()) {
		t.Fatalf("Alloc on %#x = %#x, last error %q, want the adoption's %q", bogus, p, a.LastError(), wantErr)
	}
	if err := a.Free(0x1000, 256, 0, bogus); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Fatalf("Free on %#x: %v", bogus, err)
	}
	if st := stats(t, a, 0); st.Errors != 1 || st.BadFrees != 1 || st.LiveAllocs != 0 {
		t.Fatalf("after the refused handle: %+v", st)
	}
}

// TestSimDestroyStreamDefaultStreams: the default streams' handles (0, the
// legacy stream, which the allocator keeps once adopted, and the
// per-thread stream) are not streams of SimNewStream: destroying one is
// refused as the driver refuses it, and leaves the streams the allocator
// uses as they were, so the calls on them that follow succeed.
func TestSimDestroyStreamDefaultStreams(t *testing.T) {
	for _, kind := range []string{"pool", "async"} {
		t.Run(kind, func(t *testing.T) {
			a, _ := newSim(t, kind)
			p := a.Alloc(256, 0, gpu.StreamLegacy)
			c := a.AllocNoStream(512, 0)
			if p == 0 || c == 0 {
				t.Fatalf("allocations %#x %#x: %s", p, c, a.LastError())
			}
			for _, raw := range []uintptr{gpu.StreamLegacy, gpu.StreamPerThread} {
				if err := a.SimDestroyStream(0, raw); !errors.Is(err, gpu.ErrInvalidHandle) {
					t.Fatalf("SimDestroyStream(%#x): %v, want ErrInvalidHandle", raw, err)
				}
			}
			q := a.Alloc(1024, 0, gpu.StreamLegacy)
			r := a.AllocNoStream(2048, 0)
			if q == 0 || r == 0 {
				t.Fatalf("allocations on the legacy stream after the refused destroys: %#x %#x: %s", q, r, a.LastError())
			}
			if err := errors.Join(a.Free(p, 256, 0, gpu.StreamLegacy), a.FreeNoSize(c, 0),
				a.Free(q, 1024, 0, gpu.StreamLegacy), a.FreeNoSize(r, 0)); err != nil {
				t.Fatal(err)
			}
			if st := stats(t, a, 0); st.Errors != 0 || st.BadFrees != 0 || st.LiveAllocs != 0 || st.Allocs != 4 || st.Frees != 4 {
				t.Fatalf("after the refused destroys: %+v", st)
			}
		})
	}
}

// TestDeviceHotLine: what every call reads and writes of a device's state
// is its first 64 bytes, on one cache line of the allocated state; the
// pool is called directly exactly when it is the top of the stack; the
// counters the line holds stay exact (live allocations as allocations
// less frees).
func TestDeviceHotLine(t *testing.T) {
	if n := unsafe.Sizeof(deviceHot{}); n != 64 {
		t.Errorf("deviceHot is %d bytes, want 64 (one cache line)", n)
	}
	if off := unsafe.Offsetof(device{}.deviceHot); off != 0 {
		t.Errorf("deviceHot at offset %d, want 0", off)
	}
	if n := unsafe.Sizeof(device{}); n != deviceSize {
		t.Errorf("device is %d bytes, want %d", n, deviceSize)
	}
	for _, c := range []struct {
		conf    string
		wantTop bool
	}{
		{"pool,upstream=vmm,mapped_slack,small_at_peak", true},
		{"pool", true},
		{"pool,track", false},
		{"async", false},
	} {
		t.Run(c.conf, func(t *testing.T) {
			a, _ := newSim(t, c.conf)
			p := a.Alloc(1000, 0, gpu.StreamLegacy)
			q := a.Alloc(3000, 0, gpu.StreamLegacy)
			if p == 0 || q == 0 {
				t.Fatalf("allocations failed: %s", a.LastError())
			}
			d := a.devs[0].Load()
			if addr := uintptr(unsafe.Pointer(d)); addr%64 != 0 {
				t.Errorf("device state at %#x, not on a cache line's start", addr)
			}
			if got := d.top != nil; got != c.wantTop {
				t.Errorf("pool called directly: %v, want %v", got, c.wantTop)
			}
			if err := a.Free(p, 1000, 0, gpu.StreamLegacy); err != nil {
				t.Fatal(err)
			}
			st := stats(t, a, 0)
			if st.Allocs != 2 || st.Frees != 1 || st.LiveAllocs != 1 || st.Live != 3000 || st.PeakLive != 4000 {
				t.Errorf("allocs %d frees %d live allocs %d live %d peak %d, want 2 1 1 3000 4000",
					st.Allocs, st.Frees, st.LiveAllocs, st.Live, st.PeakLive)
			}
			if err := a.Free(q, 3000, 0, gpu.StreamLegacy); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// staleFree is a resource whose next Allocate, once armed, lets the host
// free the block it hands out before the allocator has counted it: a
// stale free of an address the pool has just handed out again (a double
// free in the host racing the reuse of its address on another thread),
// which the pool accepts because the address is live. during is called
// between that free and the allocation's return.
type staleFree struct {
	mr.Resource
	a      *Allocator
	size   int
	armed  bool
	during func()
}

func (r *staleFree) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	p, err := r.Resource.Allocate(size, s)
	if err != nil || !r.armed {
		return p, err
	}
	r.armed = false
	if err := r.a.Free(uintptr(p), uint64(size), 0, gpu.StreamLegacy); err != nil {
		return p, err
	}
	r.during()
	return p, nil
}

// TestStatsFreeBeforeItsAllocation: a free counted before the allocation
// of its address (a host's double free racing the address's reuse) never
// makes Stats report more live allocations than were made, nor negative
// live bytes: both read 0 in between, and the counters agree after.
func TestStatsFreeBeforeItsAllocation(t *testing.T) {
	a, _ := newSim(t, "")
	r := &staleFree{a: a}
	a.wrap = func(up mr.Resource) mr.Resource { r.Resource = up; return r }
	if p := a.Alloc(1000, 0, gpu.StreamLegacy); p == 0 { // opens the device
		t.Fatalf("allocation failed: %s", a.LastError())
	} else if err := a.Free(p, 1000, 0, gpu.StreamLegacy); err != nil {
		t.Fatal(err)
	}
	var between Stats
	r.armed, r.during = true, func() { between = stats(t, a, 0) }
	if p := a.Alloc(1000, 0, gpu.StreamLegacy); p == 0 {
		t.Fatalf("allocation failed: %s", a.LastError())
	}
	if between.Allocs != 1 || between.Frees != 2 || between.LiveAllocs != 0 || between.Live != 0 {
		t.Errorf("between the free and its allocation: allocs %d frees %d live allocs %d live %d, want 1 2 0 0",
			between.Allocs, between.Frees, between.LiveAllocs, between.Live)
	}
	if st := stats(t, a, 0); st.Allocs != 2 || st.Frees != 2 || st.LiveAllocs != 0 || st.Live != 0 {
		t.Errorf("after: allocs %d frees %d live allocs %d live %d, want 2 2 0 0", st.Allocs, st.Frees, st.LiveAllocs, st.Live)
	}
}
