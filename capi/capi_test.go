package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// library is the folder scripts/build-capi.sh built into, once for all
// the package's tests: a build links the library, seconds on 2 cores.
// TestMain removes it.
var library struct {
	once sync.Once
	dir  string
	skip string // why it cannot be built here, if it cannot
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if library.dir != "" {
		os.RemoveAll(library.dir)
	}
	os.Exit(code)
}

// buildLibrary returns the folder into which scripts/build-capi.sh, the
// build a user runs, with the go command that runs the test, built
// libstreamalloc.so, streamalloc.h, capi_bench and libtorch_control.so
// for the package's tests (the first call builds them). A build failure
// fails the test; a machine without gcc, bash or the go command skips it.
func buildLibrary(t *testing.T) string {
	t.Helper()
	library.once.Do(func() { library.dir, library.skip, library.err = runBuildScript() })
	if library.skip != "" {
		t.Skip(library.skip)
	}
	if library.err != nil {
		t.Fatal(library.err)
	}
	return library.dir
}

// runBuildScript runs scripts/build-capi.sh into a new temporary folder
// and returns the folder, or why the library cannot be built here, or the
// build's error.
func runBuildScript() (dir, skip string, err error) {
	for _, tool := range []string{"gcc", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", "no " + tool + ": cannot build the C ABI here", nil
		}
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin")
	if _, err := os.Stat(filepath.Join(gobin, "go")); err != nil {
		// A test binary carried to a machine without Go (the GPU
		// machine of scripts/gpu-run.sh): scripts/interop-gpu.sh proves
		// the library there, built where Go is.
		return "", "no go command to build the library: " + err.Error(), nil
	}
	dir, err = os.MkdirTemp("", "capi-test-")
	if err != nil {
		return "", "", err
	}
	cmd := exec.Command("bash", filepath.Join("..", "scripts", "build-capi.sh"), dir)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "PATH="+gobin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return dir, "", fmt.Errorf("scripts/build-capi.sh: %v\n%s", err, out)
	}
	return dir, "", nil
}

// compile builds a C program of testdata against the library in dir.
func compile(t *testing.T, dir, src string) string {
	t.Helper()
	exe := filepath.Join(dir, strings.TrimSuffix(src, ".c"))
	cmd := exec.Command("gcc", "-Wall", "-Wextra", "-Werror", "-O2", "-o", exe, filepath.Join("testdata", src),
		"-I", dir, "-L", dir, "-lstreamalloc", "-lpthread", "-ldl", "-Wl,-rpath,"+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", src, err, out)
	}
	return exe
}

// TestCProgram runs testdata/capi_test.c, a host program linked against
// libstreamalloc.so, on the simulated GPU: raw stream handles, the stats
// struct, bad frees, out of memory, CuPy's interface, threads.
func TestCProgram(t *testing.T) {
	dir := buildLibrary(t)
	exe := compile(t, dir, "capi_test.c")
	compile(t, dir, "capi_bench.c") // the benchmark builds too
	compile(t, dir, "cold_lines.c") // and the program scripts/cold-lines.sh traces
	// The pool over cuMemAlloc, then over mapped virtual memory.
	for _, args := range [][]string{nil, {"upstream=vmm"}} {
		cmd := exec.Command(exe, args...)
		cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "STREAMALLOC_CONF=") })
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "capi test ok") {
			t.Fatalf("capi_test %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Run("TorchControl", func(t *testing.T) {
		// The C control of scripts/torch-bench.py builds as a shared
		// library, and, linked into a test program, forwards to the
		// library in mode sa and counts what it served, and in mode cache
		// caches blocks over a fake driver (testdata/fake_cuda.c).
		lib := filepath.Join(dir, "libtorch_control.so")
		cmd := exec.Command("gcc", "-Wall", "-Wextra", "-Werror", "-O2", "-shared", "-fPIC", "-o", lib,
			filepath.Join("testdata", "torch_control.c"), "-ldl")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gcc torch_control.c: %v\n%s", err, out)
		}
		exe := filepath.Join(dir, "torch_control_test")
		cmd = exec.Command("gcc", "-Wall", "-Wextra", "-Werror", "-O2", "-o", exe,
			filepath.Join("testdata", "torch_control_test.c"), filepath.Join("testdata", "torch_control.c"), "-ldl", "-lpthread")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gcc torch_control_test.c: %v\n%s", err, out)
		}
		fake := filepath.Join(dir, "libfakecuda.so")
		cmd = exec.Command("gcc", "-Wall", "-Wextra", "-Werror", "-O2", "-shared", "-fPIC", "-o", fake,
			filepath.Join("testdata", "fake_cuda.c"), "-lpthread")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gcc fake_cuda.c: %v\n%s", err, out)
		}
		// A mode that crosses into Go without TORCH_CONTROL_LIB serves
		// nothing, as a bad mode does.
		for _, c := range []struct {
			arg, mode string
			lib       bool
		}{{"sa", "sa", true}, {"cache", "cache", true}, {"cache+go", "cache+go", true}, {"bad", "cuda", true}, {"bad", "cache+go", false}} {
			cmd := exec.Command(exe, c.arg)
			cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
				return strings.HasPrefix(kv, "STREAMALLOC_CONF=") || strings.HasPrefix(kv, "TORCH_CONTROL")
			}),
				"TORCH_CONTROL="+c.mode, "STREAMALLOC_CONF=pool,backend=sim", "TORCH_CONTROL_DRIVER="+fake, "FAKE_CUDA_LIMIT=3221225472")
			if c.lib {
				cmd.Env = append(cmd.Env, "TORCH_CONTROL_LIB="+filepath.Join(dir, "libstreamalloc.so"))
			}
			if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "torch_control test ok") {
				t.Fatalf("torch_control_test %s (TORCH_CONTROL=%s): %v\n%s", c.arg, c.mode, err, out)
			}
		}
	})
	t.Run("PythonShim", func(t *testing.T) {
		py, err := exec.LookPath("python3")
		if err != nil {
			t.Skip("no python3")
		}
		for _, args := range [][]string{nil, {"upstream=vmm"}} {
			cmd := exec.Command(py, append([]string{filepath.Join("..", "python", "test_streamalloc_torch.py")}, args...)...)
			cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "STREAMALLOC_CONF=") }),
				"STREAMALLOC_LIB="+filepath.Join(dir, "libstreamalloc.so"))
			if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "shim test ok") {
				t.Fatalf("python shim %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	})
	t.Run("HeaderMatchesExports", func(t *testing.T) {
		// cgo's own header of the exports (the one a c-shared build
		// writes beside the library, which build-capi.sh leaves out),
		// from cgo alone: no second link.
		tmp := t.TempDir()
		gen := filepath.Join(tmp, "libstreamalloc.h")
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "tool", "cgo", "-objdir", tmp, "-exportheader", gen, "capi.go")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go tool cgo -exportheader: %v\n%s", err, out)
		}
		h, err := os.ReadFile(gen)
		if err != nil {
			t.Fatal(err)
		}
		pub, err := os.ReadFile("streamalloc.h")
		if err != nil {
			t.Fatal(err)
		}
		want, got := prototypes(string(h)), prototypes(string(pub))
		// The allocation entry points return uintptr_t in Go, declared
		// void* for the host (capi.go says why): exactly those, and
		// only with that result, compare as void*.
		for i, p := range want {
			for _, name := range uintptrResults {
				if strings.Contains(p, " "+name+"(") {
					r, ok := strings.CutPrefix(p, "uintptr_t ")
					if !ok {
						t.Fatalf("%s: the export returns %q, want uintptr_t", name, p)
					}
					want[i] = "void* " + r
				}
			}
		}
		slices.Sort(want)
		if len(want) == 0 || !slices.Equal(got, want) {
			t.Fatalf("streamalloc.h declares\n\t%s\nthe exports are\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
		}
	})
}

// uintptrResults are the exports whose Go result is uintptr_t and whose
// public prototype returns void*.
var uintptrResults = []string{"sa_torch_alloc", "sa_cupy_malloc"}

// TestLibraryKeepsMonitorAwake: the library that scripts/build-capi.sh
// links keeps the Go runtime's monitor out of deep sleep while the host
// idles (the script says why), and GODEBUG=schedtrace=0 in the
// environment gives the runtime's default back. testdata/capi_monitor.c
// counts the process's voluntary context switches over 500 ms of idling
// after one call: an awake monitor ticks every 10 ms (about 50), one in
// deep sleep about never. On a host up longer than the schedtrace period
// (24.8 days) the monitor prints one SCHED line on stderr at the start,
// and the count on stdout stands as it does elsewhere.
func TestLibraryKeepsMonitorAwake(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts switches in /proc")
	}
	dir := buildLibrary(t)
	exe := compile(t, dir, "capi_monitor.c")
	// run runs the program, after the command prefix if any, and returns
	// the switches it counted (its stdout) and what it wrote on stderr.
	run := func(t *testing.T, prefix []string, godebug ...string) (int, string) {
		t.Helper()
		args := append(slices.Clone(prefix), exe)
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GODEBUG=") }), godebug...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var n int
		if _, serr := fmt.Sscanf(string(out), "switches %d\n", &n); err != nil || serr != nil {
			t.Fatalf("capi_monitor %v: %v, %v\n%s%s", godebug, err, serr, out, stderr.String())
		}
		return n, stderr.String()
	}
	if n, _ := run(t, nil); n < 20 {
		t.Errorf("library as built: %d voluntary switches in 500 ms idle, want at least 20 (a monitor tick every 10 ms)", n)
	}
	if n, _ := run(t, nil, "GODEBUG=schedtrace=0"); n > 10 {
		t.Errorf("GODEBUG=schedtrace=0: %d voluntary switches in 500 ms idle, want at most 10 (the monitor in deep sleep)", n)
	}
	t.Run("HostUpLongerThanThePeriod", func(t *testing.T) {
		// In a time namespace whose monotonic clock, the monitor's,
		// reads 25.5 days, as on a host up that long.
		uptime := []string{"unshare", "--user", "--map-root-user", "--time", "--monotonic", "2200000"}
		if out, err := exec.Command(uptime[0], append(uptime[1:], "true")...).CombinedOutput(); err != nil {
			t.Skipf("no time namespace here: %v %s", err, out)
		}
		n, stderr := run(t, uptime)
		if n < 20 {
			t.Errorf("%d voluntary switches in 500 ms idle, want at least 20", n)
		}
		if !strings.HasPrefix(stderr, "SCHED ") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("stderr %q, want one SCHED line", stderr)
		}
		if n, stderr := run(t, uptime, "GODEBUG=schedtrace=0"); n > 10 || stderr != "" {
			t.Errorf("GODEBUG=schedtrace=0: %d voluntary switches, stderr %q; want at most 10 and nothing", n, stderr)
		}
	})
}

var protoRE = regexp.MustCompile(`(?m)^(?:extern )?([a-z_0-9 ]+\*?) ?(sa_[a-z_]+)\(([^)]*)\);`)

// prototypes lists the sa_ functions a header declares, normalized
// (sorted; no const, extern, or parameter names), so that the hand-written
// header and the one cgo generates can be compared.
func prototypes(h string) []string {
	var ps []string
	for _, m := range protoRE.FindAllStringSubmatch(h, -1) {
		var params []string
		for _, p := range strings.Split(m[3], ",") {
			p = strings.TrimSpace(strings.ReplaceAll(p, "const ", ""))
			p = strings.ReplaceAll(p, " *", "* ")
			if i := strings.LastIndexAny(p, " *"); i >= 0 && p != "void" {
				p = strings.TrimSpace(p[:i+1])
			}
			params = append(params, p)
		}
		ret := strings.ReplaceAll(strings.TrimSpace(m[1]), " *", "*")
		ps = append(ps, ret+" "+m[2]+"("+strings.Join(params, ", ")+")")
	}
	slices.Sort(ps)
	return ps
}

// TestExportsAllocateNothing: the exported pairs, called as C calls them
// (the Go functions behind the exports, with the conversions and the
// deferred recovery), allocate no Go memory once the stream and the
// pool's chunk exist, on the simulator, on the legacy stream and a raw
// stream of another library (the per-thread stream is pluggable's test). A Go allocation per call would
// make the garbage collector run inside the host process, where the
// host's threads that call in would assist it or wait for it.
func TestExportsAllocateNothing(t *testing.T) {
	if err := a.Configure("pool,backend=sim"); err != nil {
		t.Fatal(err)
	}
	raw := sa_sim_stream_create(0) // a stream of another library
	if raw == nil {
		t.Fatalf("sa_sim_stream_create: %s", a.LastError())
	}
	for _, c := range []struct {
		name string
		pair func() bool
	}{
		{"torch 1 MiB, legacy stream", func() bool {
			p := sa_torch_alloc(1<<20, 0, nil)
			sa_torch_free(ptr(uintptr(p)), 1<<20, 0, nil)
			return p != 0
		}},
		{"torch 64 MiB, raw stream", func() bool {
			p := sa_torch_alloc(64<<20, 0, raw)
			sa_torch_free(ptr(uintptr(p)), 64<<20, 0, raw)
			return p != 0
		}},
		{"cupy 1 MiB", func() bool {
			p := sa_cupy_malloc(nil, 1<<20, 0)
			sa_cupy_free(nil, ptr(uintptr(p)), 0)
			return p != 0
		}},
	} {
		if !c.pair() {
			t.Fatalf("%s: allocation failed: %s", c.name, a.LastError())
		}
		n := testing.AllocsPerRun(1000, func() {
			if !c.pair() {
				t.Fatalf("%s: allocation failed: %s", c.name, a.LastError())
			}
		})
		if n != 0 {
			t.Errorf("%s: %v Go allocations per pair, want 0", c.name, n)
		}
	}
	if st, err := a.Stats(0); err != nil || st.BadFrees != 0 || st.Errors != 0 || st.LiveAllocs != 0 {
		t.Errorf("stats %+v, %v: want no failures and nothing live", st, err)
	}
	if rc := sa_sim_stream_destroy(0, raw); rc != 0 {
		t.Errorf("sa_sim_stream_destroy: %d, %s", rc, a.LastError())
	}
}
