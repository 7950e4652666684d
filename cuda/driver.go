// Loading the driver, initialization and the driver's version.
//
// The driver is loaded and initialized once per process, on the first call
// of any entry point (sync.Once): dlopen("libcuda.so.1"), then every entry
// point resolved, then cuInit(0). The outcome never changes afterwards, so
// every entry point starts with ready(), which after the first call is one
// atomic load:
//
//   - no library, or a build without cgo: ErrNoDriver (wrapped, with why);
//   - cuInit failed (no device: CUDA_ERROR_NO_DEVICE): that *Error, which
//     matches ErrNoDevice;
//   - otherwise nil, and the call goes to the driver.
//
// # Contexts and goroutines
//
// The driver keeps a current context per OS thread, and goroutines move
// between OS threads at any time. This package never relies on what is
// current: every call that needs a context takes it as a value (Context is
// the receiver of those methods), and the C wrapper makes it current on
// the calling thread, if the driver says it is not already, inside the same
// cgo call as the operation itself. A goroutine may therefore migrate
// between any two calls without runtime.LockOSThread, and each call is one
// cgo call. Contexts are left current on the threads they were used on;
// that is harmless for primary contexts, which live as long as the process
// holds a reference.

package cuda

import (
	"fmt"
	"os"
	"sync"
)

// LibraryEnv names the environment variable that, when set, replaces
// "libcuda.so.1" as the library to load: a path to a particular driver,
// or, in tests, to a stand-in library or to nothing at all.
const LibraryEnv = "STREAMALLOC_CUDA_LIBRARY"

var (
	loadOnce  sync.Once
	libLoaded bool  // libcuda.so.1 was opened and its entry points resolved
	readyErr  error // nil once cuInit succeeded; otherwise why not
)

func load() {
	loadOnce.Do(func() {
		path := os.Getenv(LibraryEnv)
		if path == "" {
			path = "libcuda.so.1"
		}
		if code, why := rawLoad(path); code != 0 {
			readyErr = fmt.Errorf("%w: %s", ErrNoDriver, why)
			return
		}
		libLoaded = true
		if r := rawInit(); r != Success {
			readyErr = &Error{Op: "cuInit", Code: r}
		}
	})
}

// ready loads and initializes the driver on first use and reports whether
// calls can go to it.
func ready() error {
	load()
	return readyErr
}

// Init loads the driver and initializes it. Calling it is optional (every
// entry point does it on first use) and it may be called any number of
// times; it returns the same error each time: one matching ErrNoDriver
// when no driver can be loaded, an *Error matching ErrNoDevice when the
// driver finds no device.
func Init() error { return ready() }

// Has reports whether the loaded driver exports the named entry point,
// given by its API name without version suffix ("cuMemAllocAsync"). It is
// false when no driver is loaded. Calls whose entry point is missing
// return an *Error matching ErrNotSupported.
func Has(api string) bool {
	load()
	return libLoaded && rawHas(api)
}

// DriverVersion is the version of the CUDA driver, 1000*major + 10*minor
// (13000 for CUDA 13.0). Unlike the other entry points it works when the
// driver loaded but found no device, so callers can report it.
func DriverVersion() (int, error) {
	load()
	if !libLoaded {
		return 0, readyErr
	}
	r, v := rawDriverVersion()
	if r != Success {
		return 0, &Error{Op: "cuDriverGetVersion", Code: r}
	}
	return int(int32(v)), nil
}

// ErrorName asks the driver for the name of r (cuGetErrorName), for codes
// this package has no name for. Without a driver it returns r.Name().
func ErrorName(r Result) string {
	load()
	if !libLoaded {
		return r.Name()
	}
	if res, name := rawErrorName(r); res == Success && name != "" {
		return name
	}
	return r.Name()
}

// check turns a driver result into an error naming op; it is Check
// without the exported name, kept small so hot callers inline it.
func check(op string, r Result) error {
	if r == Success {
		return nil
	}
	return &Error{Op: op, Code: r}
}
