// Tests of the paths without a usable driver: no library, a library that
// is not a driver, a driver with no device, a driver missing entry points.
// They run everywhere, CI included: each runs the test binary again in a
// child process with the library it needs (see entrypoints_test.go). The
// stand-in drivers are compiled here from a few lines of C; without a C
// compiler those tests skip, saying so.

package cuda_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/cuda"
)

// runChild runs this test binary as a helper in mode, with env added.
func runChild(t *testing.T, mode string, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper %s (%s): %v\n%s", mode, strings.Join(env, " "), err, out)
	}
	if !strings.Contains(string(out), "helper "+mode+" ok") {
		t.Fatalf("helper %s did not run its check:\n%s", mode, out)
	}
}

// fakeDriver compiles src into a shared library named libcuda.so.1 in a
// temporary directory and returns its path.
func fakeDriver(t *testing.T, src string) string {
	t.Helper()
	if !withCgo {
		t.Skip("built without cgo: no library can be loaded, so every driver is no driver (TestNoDriverEveryEntryPoint)")
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) to build a stand-in driver: %v", cc, err)
	}
	dir := t.TempDir()
	c := filepath.Join(dir, "fake.c")
	lib := filepath.Join(dir, "libcuda.so.1")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, c).CombinedOutput(); err != nil {
		t.Fatalf("building stand-in driver: %v\n%s", err, out)
	}
	return lib
}

func TestNoDriverEveryEntryPoint(t *testing.T) {
	if err := cuda.Init(); errors.Is(err, cuda.ErrNoDriver) {
		// This machine has no driver: check in this process too.
		for _, ep := range entryPoints() {
			if err := ep.call(); !errors.Is(err, cuda.ErrNoDriver) {
				t.Errorf("%s: got %v, want ErrNoDriver", ep.name, err)
			}
		}
	}
	runChild(t, "nodriver", cuda.LibraryEnv+"="+filepath.Join(t.TempDir(), "no", "libcuda.so.1"))
}

func TestLibraryWithoutCuInitIsNoDriver(t *testing.T) {
	lib := fakeDriver(t, "int cuDriverGetVersion(int *v) { *v = 13000; return 0; }\n")
	runChild(t, "nocuinit", cuda.LibraryEnv+"="+lib)
}

func TestDriverWithoutDevice(t *testing.T) {
	lib := fakeDriver(t, `
int cuInit(unsigned flags) { (void)flags; return 100; /* CUDA_ERROR_NO_DEVICE */ }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
`)
	runChild(t, "nodevice", cuda.LibraryEnv+"="+lib, "STREAMALLOC_CUDA_FAKE_VERSION=1")
}

func TestMissingEntryPointsAreNotSupported(t *testing.T) {
	lib := fakeDriver(t, `
int cuInit(unsigned flags) { (void)flags; return 0; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
`)
	runChild(t, "missing", cuda.LibraryEnv+"="+lib)
}

// With the real driver, hiding every device makes cuInit fail with
// CUDA_ERROR_NO_DEVICE; every entry point must say so.
func TestRealDriverHidingDevices(t *testing.T) {
	if err := cuda.Init(); errors.Is(err, cuda.ErrNoDriver) {
		t.Skip("no CUDA driver on this machine; TestDriverWithoutDevice covers the path with a stand-in")
	}
	runChild(t, "nodevice", "CUDA_VISIBLE_DEVICES=")
}

func TestErrorsMatchSentinels(t *testing.T) {
	tests := []struct {
		code cuda.Result
		want error
		name string
	}{
		{cuda.ErrOutOfMemory, cuda.ErrOutOfMemory, "CUDA_ERROR_OUT_OF_MEMORY"},
		{cuda.ErrNotReady, cuda.ErrNotReady, "CUDA_ERROR_NOT_READY"},
		{cuda.ErrInvalidValue, cuda.ErrInvalidValue, "CUDA_ERROR_INVALID_VALUE"},
		{cuda.ErrNoDevice, cuda.ErrNoDevice, "CUDA_ERROR_NO_DEVICE"},
	}
	for _, tt := range tests {
		err := error(&cuda.Error{Op: "cuMemAllocAsync", Code: tt.code})
		if !errors.Is(err, tt.want) {
			t.Errorf("%v does not match %v", err, tt.want)
		}
		if errors.Is(err, cuda.ErrNoDriver) {
			t.Errorf("%v matches ErrNoDriver", err)
		}
		if errors.Is(err, cuda.ErrUnknown) || errors.Is(fmt.Errorf("wrapped: %w", err), cuda.ErrUnknown) {
			t.Errorf("%v matches another code (ErrUnknown)", err)
		}
		if !errors.Is(fmt.Errorf("wrapped: %w", err), tt.want) {
			t.Errorf("%v wrapped does not match %v", err, tt.want)
		}
		if !strings.Contains(err.Error(), "cuMemAllocAsync") || !strings.Contains(err.Error(), tt.name) {
			t.Errorf("%q should name the call and %s", err, tt.name)
		}
		if got := cuda.ErrorName(tt.code); got != tt.name {
			t.Errorf("ErrorName(%d) = %q, want %q", tt.code, got, tt.name)
		}
	}
}
