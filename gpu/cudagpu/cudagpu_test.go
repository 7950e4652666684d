// Tests of the CUDA backend. Those that need a GPU skip without one,
// unless STREAMALLOC_DEVICE=cuda, which makes them fail instead (the GPU
// script sets it). The paths without a driver or without a device run
// everywhere, in a child process given a missing or stand-in driver
// library (as in package cuda's tests).

package cudagpu_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/cudagpu"
	"github.com/streamalloc/streamalloc/gpu/gputest"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/internal/testdev"
)

const helperEnv = "STREAMALLOC_CUDAGPU_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

// helper checks, in a child process, what Open says under the driver the
// parent chose.
func helper(mode string) int {
	want := map[string]error{"nodriver": gpu.ErrNoDriver, "nodevice": gpu.ErrNoDevice}[mode]
	if want == nil {
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		return 1
	}
	for range 2 { // the second Open must say the same
		b, err := cudagpu.Open()
		if b != nil || !errors.Is(err, want) {
			fmt.Fprintf(os.Stderr, "Open: %v, %v; want nil, %v\n", b, err, want)
			return 1
		}
	}
	fmt.Println("helper", mode, "ok")
	return 0
}

func runChild(t *testing.T, mode, lib string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, cuda.LibraryEnv+"="+lib)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "helper "+mode+" ok") {
		t.Fatalf("helper %s: %v\n%s", mode, err, out)
	}
}

func TestOpenWithoutDriver(t *testing.T) {
	if errors.Is(cuda.Init(), cuda.ErrNoDriver) {
		// No driver on this machine: Open here must say so too.
		b, err := cudagpu.Open()
		if b != nil || !errors.Is(err, gpu.ErrNoDriver) {
			t.Errorf("Open on this machine: %v, %v; want nil, ErrNoDriver", b, err)
		}
	}
	runChild(t, "nodriver", filepath.Join(t.TempDir(), "none", "libcuda.so.1"))
}

func TestOpenWithoutDevice(t *testing.T) {
	if !withCgo {
		t.Skip("built without cgo: no library can be loaded (TestOpenWithoutDriver)")
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler to build a stand-in driver: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "fake.c")
	lib := filepath.Join(dir, "libcuda.so.1")
	code := "int cuInit(unsigned f) { (void)f; return 100; }\nint cuDriverGetVersion(int *v) { *v = 13000; return 0; }\n"
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	runChild(t, "nodevice", lib)
}

var (
	openOnce sync.Once
	theDev   *cudagpu.Device
	theBack  gpu.Backend
	openErr  error
)

// needDevice returns device 0 of the CUDA backend.
func needDevice(tb testing.TB) (gpu.Backend, *cudagpu.Device) {
	tb.Helper()
	openOnce.Do(func() {
		if theBack, openErr = cudagpu.Open(); openErr != nil {
			return
		}
		var d gpu.Device
		if d, openErr = theBack.Device(0); openErr == nil {
			theDev = d.(*cudagpu.Device)
		}
	})
	testdev.SkipWithoutGPU(tb, openErr)
	return theBack, theDev
}

func ok(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

func stream(tb testing.TB, d gpu.Device) gpu.Stream {
	tb.Helper()
	s := testdev.Must(d.NewStream())(tb)
	tb.Cleanup(func() {
		if err := s.Destroy(); err != nil && !errors.Is(err, gpu.ErrDestroyed) {
			tb.Error(err)
		}
	})
	return s
}

func event(tb testing.TB, d gpu.Device, timing bool) gpu.Event {
	tb.Helper()
	e := testdev.Must(d.NewEvent(timing))(tb)
	tb.Cleanup(func() {
		if err := e.Destroy(); err != nil && !errors.Is(err, gpu.ErrDestroyed) {
			tb.Error(err)
		}
	})
	return e
}

func TestBackendAndDevice(t *testing.T) {
	b, d := needDevice(t)
	if b.Name() != "cuda" || b.Simulated() {
		t.Errorf("Name %q Simulated %v", b.Name(), b.Simulated())
	}
	again := testdev.Must(cudagpu.Open())(t)
	if again != b {
		t.Error("Open returned a second backend")
	}
	if d2 := testdev.Must(b.Device(0))(t); d2 != gpu.Device(d) {
		t.Error("Device(0) twice gave two devices")
	}
	n := testdev.Must(b.DeviceCount())(t)
	for _, ord := range []int{-1, n, 1 << 40} {
		if _, err := b.Device(ord); !errors.Is(err, gpu.ErrInvalidDevice) {
			t.Errorf("Device(%d): %v, want ErrInvalidDevice", ord, err)
		}
	}
	v := testdev.Must(b.DriverVersion())(t)
	p := d.Properties()
	free, total, err := d.MemGetInfo()
	ok(t, err)
	t.Logf("driver %d; %+v; free %d MiB of %d MiB", v, p, free>>20, total>>20)
	if p.Name == "" || p.TotalMemory == 0 || p.ComputeMajor < 7 || !p.MemoryPoolsSupported || p.Simulated || p.Ordinal != 0 || total != p.TotalMemory {
		t.Errorf("implausible properties %+v", p)
	}
	ok(t, d.Synchronize())
}

func TestStreamIDs(t *testing.T) {
	_, d := needDevice(t)
	seen := map[uint64]bool{}
	for range 10 {
		s := stream(t, d)
		if s.ID() == 0 || seen[s.ID()] {
			t.Fatalf("stream ID %d repeated or zero", s.ID())
		}
		seen[s.ID()] = true
		if s.Device() != gpu.Device(d) {
			t.Error("stream's device")
		}
	}
}

// foreign handles stand for handles of another backend (the simulator):
// they satisfy the interfaces but are not CUDA handles.
type foreignStream struct{ gpu.Stream }
type foreignEvent struct{ gpu.Event }
type foreignPool struct{ gpu.MemPool }
type foreignFunc struct{}

func (foreignFunc) Name() string { return "foreign" }

func TestBadHandles(t *testing.T) {
	_, d := needDevice(t)
	live := stream(t, d)
	dead := testdev.Must(d.NewStream())(t)
	ok(t, dead.Destroy())
	deadEvent := testdev.Must(d.NewEvent(false))(t)
	ok(t, deadEvent.Destroy())
	liveEvent := event(t, d, false)
	pool := testdev.Must(d.NewMemPool())(t)
	ok(t, pool.Destroy())
	mod := testdev.Must(d.LoadModule(kernels.PTX))(t)
	spin := testdev.Must(mod.Function(kernels.SpinEntry))(t)
	ok(t, mod.Unload())
	var nilStream *cudagpu.Stream
	var nilEvent *cudagpu.Event

	streams := []struct {
		name string
		s    gpu.Stream
		want error
	}{
		{"nil", nil, gpu.ErrInvalidHandle},
		{"typed nil", nilStream, gpu.ErrInvalidHandle},
		{"destroyed", dead, gpu.ErrDestroyed},
		{"foreign", foreignStream{}, gpu.ErrWrongDevice},
	}
	for _, tt := range streams {
		s := tt.s
		calls := map[string]error{
			"MallocAsync":         second(d.MallocAsync(256, s)),
			"FreeAsync":           d.FreeAsync(0x1000, s),
			"MallocFromPoolAsync": second(d.MallocFromPoolAsync(256, testdev.Must(d.DefaultMemPool())(t), s)),
			"MemsetD8Async":       d.MemsetD8Async(0x1000, 0, 16, s),
			"CopyHtoDAsync":       d.CopyHtoDAsync(0x1000, make([]byte, 16), s),
			"CopyDtoHAsync":       d.CopyDtoHAsync(make([]byte, 16), 0x1000, s),
			"CopyDtoDAsync":       d.CopyDtoDAsync(0x1000, 0x2000, 16, s),
			"Launch":              d.Launch(spin, gpu.Dim3{}, gpu.Dim3{}, 0, s, uint64(0)),
			"Event.Record":        liveEvent.Record(s),
		}
		for name, err := range calls {
			if !errors.Is(err, tt.want) {
				t.Errorf("%s with %s stream: %v, want %v", name, tt.name, err, tt.want)
			}
		}
	}
	if err := nilStream.Synchronize(); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("nil Stream.Synchronize: %v", err)
	}
	for name, err := range map[string]error{
		"Synchronize": dead.Synchronize(),
		"Query":       dead.Query(),
		"WaitEvent":   dead.WaitEvent(liveEvent),
		"Destroy":     dead.Destroy(),
	} {
		if !errors.Is(err, gpu.ErrDestroyed) {
			t.Errorf("destroyed Stream.%s: %v, want ErrDestroyed", name, err)
		}
	}

	events := []struct {
		name string
		e    gpu.Event
		want error
	}{
		{"nil", nil, gpu.ErrInvalidHandle},
		{"typed nil", nilEvent, gpu.ErrInvalidHandle},
		{"destroyed", deadEvent, gpu.ErrDestroyed},
		{"foreign", foreignEvent{}, gpu.ErrWrongDevice},
	}
	for _, tt := range events {
		if err := live.WaitEvent(tt.e); !errors.Is(err, tt.want) {
			t.Errorf("WaitEvent(%s event): %v, want %v", tt.name, err, tt.want)
		}
		if _, err := liveEvent.(*cudagpu.Event).ElapsedSince(tt.e); !errors.Is(err, tt.want) {
			t.Errorf("ElapsedSince(%s event): %v, want %v", tt.name, err, tt.want)
		}
	}
	for name, err := range map[string]error{
		"Record":       deadEvent.Record(live),
		"Query":        deadEvent.Query(),
		"Synchronize":  deadEvent.Synchronize(),
		"ElapsedSince": second(deadEvent.ElapsedSince(liveEvent)),
		"Destroy":      deadEvent.Destroy(),
	} {
		if !errors.Is(err, gpu.ErrDestroyed) {
			t.Errorf("destroyed Event.%s: %v, want ErrDestroyed", name, err)
		}
	}
	if err := nilEvent.Record(live); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("nil Event.Record: %v", err)
	}

	for name, err := range map[string]error{
		"Attribute":    second(pool.Attribute(gpu.PoolReleaseThreshold)),
		"SetAttribute": pool.SetAttribute(gpu.PoolReleaseThreshold, 0),
		"TrimTo":       pool.TrimTo(0),
		"Destroy":      pool.Destroy(),
		"MallocFrom":   second(d.MallocFromPoolAsync(256, pool, live)),
	} {
		if !errors.Is(err, gpu.ErrDestroyed) {
			t.Errorf("destroyed MemPool.%s: %v, want ErrDestroyed", name, err)
		}
	}
	if _, err := d.MallocFromPoolAsync(256, nil, live); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("MallocFromPoolAsync(nil pool): %v", err)
	}
	if _, err := d.MallocFromPoolAsync(256, foreignPool{}, live); !errors.Is(err, gpu.ErrWrongDevice) {
		t.Errorf("MallocFromPoolAsync(foreign pool): %v", err)
	}
	def := testdev.Must(d.DefaultMemPool())(t)
	if err := def.Destroy(); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("destroying the default pool: %v, want ErrInvalidValue", err)
	}

	for name, err := range map[string]error{
		"Launch after Unload":   d.Launch(spin, gpu.Dim3{}, gpu.Dim3{}, 0, live, uint64(0)),
		"Function after Unload": second(mod.Function(kernels.FillEntry)),
		"Unload twice":          mod.Unload(),
	} {
		if !errors.Is(err, gpu.ErrDestroyed) {
			t.Errorf("%s: %v, want ErrDestroyed", name, err)
		}
	}
	if err := d.Launch(nil, gpu.Dim3{}, gpu.Dim3{}, 0, live); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("Launch(nil): %v", err)
	}
	if err := d.Launch(foreignFunc{}, gpu.Dim3{}, gpu.Dim3{}, 0, live); !errors.Is(err, gpu.ErrWrongDevice) {
		t.Errorf("Launch(foreign function): %v", err)
	}
	ok(t, live.Synchronize())
}

func second[T any](_ T, err error) error { return err }

// With two devices, handles of one are refused by the other.
func TestOtherDeviceHandles(t *testing.T) {
	b, d0 := needDevice(t)
	if n := testdev.Must(b.DeviceCount())(t); n < 2 {
		t.Skipf("%d device: TestBadHandles covers foreign handles; this needs two GPUs", n)
	}
	d1 := testdev.Must(b.Device(1))(t)
	s1 := stream(t, d1)
	e1 := event(t, d1, false)
	if _, err := d0.MallocAsync(256, s1); !errors.Is(err, gpu.ErrWrongDevice) {
		t.Errorf("MallocAsync on device 0 with a stream of device 1: %v", err)
	}
	if err := stream(t, d0).WaitEvent(e1); !errors.Is(err, gpu.ErrWrongDevice) {
		t.Errorf("WaitEvent on an event of device 1: %v", err)
	}
}

func TestBadSizes(t *testing.T) {
	_, d := needDevice(t)
	s := stream(t, d)
	def := testdev.Must(d.DefaultMemPool())(t)
	neg := map[string]error{
		"Malloc":              second(d.Malloc(-1)),
		"MallocAsync":         second(d.MallocAsync(-1, s)),
		"MallocFromPoolAsync": second(d.MallocFromPoolAsync(-1, def, s)),
		"MallocManaged":       second(d.MallocManaged(-1)),
		"MallocHost":          second(d.MallocHost(-1)),
		"MemsetD8Async":       d.MemsetD8Async(0x1000, 0, -1, s),
		"CopyDtoDAsync":       d.CopyDtoDAsync(0x1000, 0x2000, -1, s),
	}
	for name, err := range neg {
		if !errors.Is(err, gpu.ErrInvalidValue) {
			t.Errorf("%s(-1): %v, want ErrInvalidValue", name, err)
		}
	}
	// Absurd sizes are out of memory. (Never managed memory: asking for
	// more than the card has can hang it.)
	const absurd = 1 << 50
	oom := map[string]error{
		"Malloc":              second(d.Malloc(absurd)),
		"MallocAsync":         second(d.MallocAsync(absurd, s)),
		"MallocFromPoolAsync": second(d.MallocFromPoolAsync(absurd, def, s)),
	}
	for name, err := range oom {
		if !errors.Is(err, gpu.ErrOutOfMemory) {
			t.Errorf("%s(1 PiB): %v, want ErrOutOfMemory", name, err)
		}
	}
	// Zero bytes, and the null pointer, are invalid too (as for cuMemAlloc).
	zero := map[string]error{
		"Malloc(0)":              second(d.Malloc(0)),
		"MallocAsync(0)":         second(d.MallocAsync(0, s)),
		"MallocFromPoolAsync(0)": second(d.MallocFromPoolAsync(0, def, s)),
		"MallocManaged(0)":       second(d.MallocManaged(0)),
		"MallocHost(0)":          second(d.MallocHost(0)),
		"Free(0)":                d.Free(0),
		"FreeAsync(0)":           d.FreeAsync(0, s),
		"FreeHost(empty)":        d.FreeHost([]byte{}),
	}
	for name, err := range zero {
		if !errors.Is(err, gpu.ErrInvalidValue) {
			t.Errorf("%s: %v, want ErrInvalidValue", name, err)
		}
	}
	// Host memory that MallocHost did not return is refused.
	if err := d.FreeHost(make([]byte, 64)); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("FreeHost(Go memory): %v, want ErrInvalidValue", err)
	}
	pinned := testdev.Must(d.MallocHost(4096))(t)
	ok(t, d.FreeHost(pinned))
	if err := d.FreeHost(pinned); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("FreeHost twice: %v, want ErrInvalidValue", err)
	}
	// The device is still usable after all that.
	p := testdev.Must(d.MallocAsync(1<<20, s))(t)
	ok(t, d.FreeAsync(p, s))
	ok(t, s.Synchronize())
}

func TestLaunchArguments(t *testing.T) {
	_, d := needDevice(t)
	s := stream(t, d)
	mod := testdev.Must(d.LoadModule(kernels.PTX))(t)
	defer mod.Unload()
	spin := testdev.Must(mod.Function(kernels.SpinEntry))(t)
	if _, err := mod.Function("nope"); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("unknown function: %v, want ErrNotFound", err)
	}
	if spin.Name() != kernels.SpinEntry {
		t.Errorf("Name %q", spin.Name())
	}
	bad := []struct {
		name      string
		grid, blk gpu.Dim3
		shared    int
		args      []any
	}{
		{"int argument", gpu.Dim3{}, gpu.Dim3{}, 0, []any{int(5)}},
		{"string argument", gpu.Dim3{}, gpu.Dim3{}, 0, []any{"x"}},
		{"negative grid", gpu.Dim3{X: -1}, gpu.Dim3{}, 0, []any{uint64(0)}},
		{"negative block", gpu.Dim3{}, gpu.Dim3{Z: -2}, 0, []any{uint64(0)}},
		{"negative shared memory", gpu.Dim3{}, gpu.Dim3{}, -1, []any{uint64(0)}},
		{"too many arguments", gpu.Dim3{}, gpu.Dim3{}, 0, make([]any, cuda.MaxParams+1)},
		{"no argument", gpu.Dim3{}, gpu.Dim3{}, 0, nil},
		{"two arguments for one", gpu.Dim3{}, gpu.Dim3{}, 0, []any{uint64(0), uint64(0)}},
		{"4 bytes for 8", gpu.Dim3{}, gpu.Dim3{}, 0, []any{uint32(0)}},
	}
	for _, tt := range bad {
		if err := d.Launch(spin, tt.grid, tt.blk, tt.shared, s, tt.args...); !errors.Is(err, gpu.ErrInvalidValue) {
			t.Errorf("%s: %v, want ErrInvalidValue", tt.name, err)
		}
	}
	// fill takes (u64, u64, u32): a pointer where the seed goes, or a
	// missing errcount, is refused before the driver reads past the block.
	fill := testdev.Must(mod.Function(kernels.FillEntry))(t)
	for _, args := range [][]any{
		{gpu.DevicePtr(0), uint64(1)},
		{gpu.DevicePtr(0), uint64(1), gpu.DevicePtr(0)},
		{gpu.DevicePtr(0), uint64(1), uint32(0), uint32(0)},
	} {
		if err := d.Launch(fill, gpu.Dim3{}, gpu.Dim3{}, 0, s, args...); !errors.Is(err, gpu.ErrInvalidValue) {
			t.Errorf("fill%v: %v, want ErrInvalidValue", args, err)
		}
	}
	if _, err := d.LoadModule("not ptx at all"); !errors.Is(err, gpu.ErrInvalidPTX) && !errors.Is(err, gpu.ErrInvalidImage) {
		t.Errorf("LoadModule(garbage): %v, want ErrInvalidPTX", err)
	}
	ok(t, s.Synchronize())
}

// The built-in kernels: fill, then copy back and check on the host; the
// check kernel counts planted mismatches; spin holds a stream.
func TestKernels(t *testing.T) {
	_, d := needDevice(t)
	k := testdev.Must(kernels.Load(d))(t)
	if k2 := testdev.Must(kernels.Load(d))(t); k2 != k {
		t.Error("kernels loaded twice")
	}
	s := stream(t, d)
	const words = 3<<20 + 5
	const seed = 12345
	p := testdev.Must(d.MallocAsync(4*words, s))(t)
	cnt := testdev.Must(d.MallocAsync(4, s))(t)
	ok(t, d.MemsetD8Async(cnt, 0, 4, s))
	ok(t, k.Fill(s, p, words, seed))
	host := make([]byte, 4*words)
	ok(t, d.CopyDtoHAsync(host, p, s))
	ok(t, s.Synchronize())
	for i := 0; i < words; i++ {
		if got := binary.LittleEndian.Uint32(host[4*i:]); got != seed+uint32(i) {
			t.Fatalf("word %d = %d, want %d", i, got, seed+uint32(i))
		}
	}
	planted := []int{1, 4096, 1 << 20, words - 1}
	for _, i := range planted {
		ok(t, d.CopyHtoDAsync(p+gpu.DevicePtr(4*i), []byte{0, 0, 0, 0x80}, s))
	}
	ok(t, k.Check(s, p, words, seed, cnt))
	var c [4]byte
	ok(t, d.CopyDtoHAsync(c[:], cnt, s))
	ok(t, s.Synchronize())
	if got := binary.LittleEndian.Uint32(c[:]); got != uint32(len(planted)) {
		t.Errorf("check counted %d mismatches, want %d", got, len(planted))
	}
	// spin holds the stream: Query is ErrNotReady until it ends.
	start := time.Now()
	ok(t, k.Spin(s, 300*time.Millisecond))
	if err := s.Query(); !errors.Is(err, gpu.ErrNotReady) {
		t.Errorf("Query while spinning: %v, want ErrNotReady", err)
	}
	ok(t, s.Synchronize())
	if el := time.Since(start); el < 290*time.Millisecond {
		t.Errorf("a 300ms spin ended after %v", el)
	}
	ok(t, s.Query())
	ok(t, d.FreeAsync(p, s))
	ok(t, d.FreeAsync(cnt, s))
	ok(t, s.Synchronize())
}

// The notebook loop: allocate 4 MiB, fill it with a kernel, check, free;
// 100 times on one stream, the data checked every time.
func TestNotebookLoop(t *testing.T) {
	_, d := needDevice(t)
	k := testdev.Must(kernels.Load(d))(t)
	s := stream(t, d)
	const words = 1 << 20 // 4 MiB
	cnt := testdev.Must(d.MallocAsync(4, s))(t)
	ok(t, d.MemsetD8Async(cnt, 0, 4, s))
	for i := range 100 {
		p := testdev.Must(d.MallocAsync(4*words, s))(t)
		ok(t, k.Fill(s, p, words, uint32(i)))
		ok(t, k.Check(s, p, words, uint32(i), cnt))
		ok(t, d.FreeAsync(p, s))
	}
	var c [4]byte
	ok(t, d.CopyDtoHAsync(c[:], cnt, s))
	if n := binary.LittleEndian.Uint32(c[:]); n != 0 {
		t.Errorf("%d words wrong over 100 rounds", n)
	}
	ok(t, d.FreeAsync(cnt, s))
	ok(t, s.Synchronize())
}

// A buffer written on s1 and read on s2 after an event wait, while s1 is
// still held by a spin: the read must see the data.
func TestCrossStreamOrder(t *testing.T) {
	_, d := needDevice(t)
	k := testdev.Must(kernels.Load(d))(t)
	s1, s2 := stream(t, d), stream(t, d)
	e := event(t, d, false)
	const words = 1 << 20
	p := testdev.Must(d.MallocAsync(4*words, s1))(t)
	cnt := testdev.Must(d.MallocAsync(4, s1))(t)
	ok(t, d.MemsetD8Async(cnt, 0, 4, s1))
	ok(t, k.Spin(s1, 50*time.Millisecond))
	ok(t, k.Fill(s1, p, words, 7))
	ok(t, e.Record(s1))
	ok(t, s2.WaitEvent(e))
	if err := e.Query(); !errors.Is(err, gpu.ErrNotReady) {
		t.Errorf("event behind a spin: %v, want ErrNotReady", err)
	}
	ok(t, k.Check(s2, p, words, 7, cnt))
	var c [4]byte
	ok(t, d.CopyDtoHAsync(c[:], cnt, s2))
	ok(t, s2.Synchronize())
	if n := binary.LittleEndian.Uint32(c[:]); n != 0 {
		t.Errorf("s2 saw %d wrong words", n)
	}
	ok(t, e.Query())
	// Allocated on s1, freed on s2 (after the wait): then reused.
	ok(t, d.FreeAsync(p, s2))
	ok(t, d.FreeAsync(cnt, s2))
	ok(t, s2.Synchronize())
	q := testdev.Must(d.MallocAsync(4*words, s1))(t)
	ok(t, d.FreeAsync(q, s1))
	ok(t, s1.Synchronize())
}

func TestEventTiming(t *testing.T) {
	_, d := needDevice(t)
	k := testdev.Must(kernels.Load(d))(t)
	s := stream(t, d)
	start, end := event(t, d, true), event(t, d, true)
	untimed := event(t, d, false)
	ok(t, start.Record(s))
	ok(t, untimed.Record(s))
	ok(t, k.Spin(s, 30*time.Millisecond))
	ok(t, end.Record(s))
	ok(t, end.Synchronize())
	el := testdev.Must(end.ElapsedSince(start))(t)
	if el < 29*time.Millisecond || el > time.Second {
		t.Errorf("a 30ms spin took %v by events", el)
	}
	if _, err := end.ElapsedSince(untimed); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("ElapsedSince(untimed): %v, want ErrInvalidHandle", err)
	}
}

func TestMemoryRoundTrip(t *testing.T) {
	_, d := needDevice(t)
	s := stream(t, d)
	const n = 3<<20 + 17
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i*31 + 1)
	}
	a := testdev.Must(d.Malloc(n))(t)
	b := testdev.Must(d.MallocAsync(n, s))(t)
	if a%256 != 0 || b%256 != 0 {
		t.Errorf("unaligned %#x %#x", a, b)
	}
	ok(t, d.CopyHtoDAsync(a, src, s))
	ok(t, d.CopyDtoDAsync(b, a, n, s))
	ok(t, d.MemsetD8Async(b+10, 0xEE, 5, s))
	pinned := testdev.Must(d.MallocHost(n))(t)
	ok(t, d.CopyDtoHAsync(pinned, b, s))
	ok(t, s.Synchronize())
	for i := range pinned {
		want := src[i]
		if i >= 10 && i < 15 {
			want = 0xEE
		}
		if pinned[i] != want {
			t.Fatalf("byte %d = %#x, want %#x", i, pinned[i], want)
		}
	}
	m := testdev.Must(d.MallocManaged(4096))(t)
	ok(t, d.CopyHtoDAsync(m, src[:4096], s))
	back := make([]byte, 4096)
	ok(t, d.CopyDtoHAsync(back, m, s))
	if string(back) != string(src[:4096]) {
		t.Error("managed memory round trip differs")
	}
	ok(t, d.FreeHost(pinned))
	ok(t, d.Free(a))
	ok(t, d.FreeAsync(b, s))
	ok(t, s.Synchronize())
	ok(t, d.Free(m))
}

func TestMemPool(t *testing.T) {
	_, d := needDevice(t)
	s := stream(t, d)
	pool := testdev.Must(d.NewMemPool())(t)
	defer func() { ok(t, pool.Destroy()) }()
	if pool.Device() != gpu.Device(d) {
		t.Error("pool's device")
	}
	for _, a := range []gpu.PoolAttr{0, 9, -1} {
		if _, err := pool.Attribute(a); !errors.Is(err, gpu.ErrInvalidValue) {
			t.Errorf("Attribute(%d): %v", a, err)
		}
	}
	bad := []struct {
		a gpu.PoolAttr
		v uint64
	}{
		{gpu.PoolReuseAllowOpportunistic, 2},
		{gpu.PoolReservedMemCurrent, 0},
		{gpu.PoolUsedMemCurrent, 0},
		{gpu.PoolReservedMemHigh, 1},
		{gpu.PoolUsedMemHigh, 1},
		{42, 0},
	}
	for _, tt := range bad {
		if err := pool.SetAttribute(tt.a, tt.v); !errors.Is(err, gpu.ErrInvalidValue) {
			t.Errorf("SetAttribute(%d, %d): %v, want ErrInvalidValue", tt.a, tt.v, err)
		}
	}
	for _, a := range []gpu.PoolAttr{gpu.PoolReuseFollowEventDependencies, gpu.PoolReuseAllowOpportunistic, gpu.PoolReuseAllowInternalDependencies} {
		for _, v := range []uint64{0, 1} {
			ok(t, pool.SetAttribute(a, v))
			if got := testdev.Must(pool.Attribute(a))(t); got != v {
				t.Errorf("attribute %d = %d after setting %d", a, got, v)
			}
		}
	}
	const n = 32 << 20
	ok(t, pool.SetAttribute(gpu.PoolReleaseThreshold, 1<<40))
	p := testdev.Must(d.MallocFromPoolAsync(n, pool, s))(t)
	ok(t, s.Synchronize())
	if used := testdev.Must(pool.Attribute(gpu.PoolUsedMemCurrent))(t); used < n {
		t.Errorf("used %d with %d allocated", used, n)
	}
	ok(t, d.FreeAsync(p, s))
	ok(t, s.Synchronize())
	reserved := testdev.Must(pool.Attribute(gpu.PoolReservedMemCurrent))(t)
	used := testdev.Must(pool.Attribute(gpu.PoolUsedMemCurrent))(t)
	if reserved < n || used != 0 {
		t.Errorf("after free, threshold high: reserved %d used %d; want >= %d, 0", reserved, used, n)
	}
	ok(t, pool.TrimTo(0))
	if r := testdev.Must(pool.Attribute(gpu.PoolReservedMemCurrent))(t); r != 0 {
		t.Errorf("reserved %d after TrimTo(0)", r)
	}
	if h := testdev.Must(pool.Attribute(gpu.PoolUsedMemHigh))(t); h < n {
		t.Errorf("used high-water %d", h)
	}
	ok(t, pool.SetAttribute(gpu.PoolUsedMemHigh, 0))
	if h := testdev.Must(pool.Attribute(gpu.PoolUsedMemHigh))(t); h != 0 {
		t.Errorf("used high-water %d after reset", h)
	}
}

func TestHotPathAllocatesNothing(t *testing.T) {
	_, d := needDevice(t)
	s1, s2 := stream(t, d), stream(t, d)
	e := event(t, d, false)
	var first error
	allocs := testing.AllocsPerRun(1000, func() {
		p, err := d.MallocAsync(4096, s1)
		if err == nil {
			err = d.FreeAsync(p, s1)
		}
		if err == nil {
			err = e.Record(s1)
		}
		if err == nil {
			err = s2.WaitEvent(e)
		}
		if err != nil && first == nil {
			first = err
		}
	})
	ok(t, first)
	if allocs != 0 {
		t.Errorf("%.1f allocations per round, want 0", allocs)
	}
	ok(t, s2.Synchronize())
}

func BenchmarkMallocAsyncFreeAsync(b *testing.B) {
	_, d := needDevice(b)
	s := stream(b, d)
	b.ReportAllocs()
	for b.Loop() {
		p, err := d.MallocAsync(1<<20, s)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.FreeAsync(p, s); err != nil {
			b.Fatal(err)
		}
	}
	ok(b, s.Synchronize())
}

func BenchmarkMallocFree(b *testing.B) {
	_, d := needDevice(b)
	b.ReportAllocs()
	for b.Loop() {
		p, err := d.Malloc(1 << 20)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.Free(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEventRecord(b *testing.B) {
	_, d := needDevice(b)
	s := stream(b, d)
	e := event(b, d, false)
	b.ReportAllocs()
	for b.Loop() {
		if err := e.Record(s); err != nil {
			b.Fatal(err)
		}
	}
	ok(b, s.Synchronize())
}

func BenchmarkStreamWaitEvent(b *testing.B) {
	_, d := needDevice(b)
	s1, s2 := stream(b, d), stream(b, d)
	e := event(b, d, false)
	ok(b, e.Record(s1))
	b.ReportAllocs()
	for b.Loop() {
		if err := s2.WaitEvent(e); err != nil {
			b.Fatal(err)
		}
	}
	ok(b, s2.Synchronize())
}

// BenchmarkMallocAsyncFreeAsyncParallel runs pairs from many goroutines,
// each on its own stream, to show how the driver's pool scales.
func BenchmarkMallocAsyncFreeAsyncParallel(b *testing.B) {
	_, d := needDevice(b)
	var mu sync.Mutex
	var streams []gpu.Stream
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s, err := d.NewStream()
		if err != nil {
			b.Error(err)
			return
		}
		mu.Lock()
		streams = append(streams, s)
		mu.Unlock()
		for pb.Next() {
			p, err := d.MallocAsync(1<<20, s)
			if err != nil {
				b.Error(err)
				return
			}
			if err := d.FreeAsync(p, s); err != nil {
				b.Error(err)
				return
			}
		}
	})
	for _, s := range streams {
		ok(b, s.Synchronize())
		ok(b, s.Destroy())
	}
}

// TestConformance runs the backend conformance suite (gpu/gputest), which
// the simulator also passes, on the GPU.
func TestConformance(t *testing.T) {
	_, d := needDevice(t)
	gputest.Run(t, d)
}
