// The driver binding's errors against the backend interface's vocabulary.
// cudagpu returns the binding's errors unchanged, so they must match gpu's
// sentinels of the same number, and the two lists must agree on numbers
// and names. These tests need no driver.

package cudagpu_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
)

// statuses pairs every gpu.Code with the cuda.Result of the same name.
var statuses = []struct {
	g gpu.Code
	c cuda.Result
}{
	{gpu.ErrInvalidValue, cuda.ErrInvalidValue},
	{gpu.ErrOutOfMemory, cuda.ErrOutOfMemory},
	{gpu.ErrNotInitialized, cuda.ErrNotInitialized},
	{gpu.ErrDeinitialized, cuda.ErrDeinitialized},
	{gpu.ErrNoDevice, cuda.ErrNoDevice},
	{gpu.ErrInvalidDevice, cuda.ErrInvalidDevice},
	{gpu.ErrInvalidImage, cuda.ErrInvalidImage},
	{gpu.ErrInvalidContext, cuda.ErrInvalidContext},
	{gpu.ErrPeerUnsupported, cuda.ErrPeerUnsupported},
	{gpu.ErrPeerEnabled, cuda.ErrPeerEnabled},
	{gpu.ErrPeerNotEnabled, cuda.ErrPeerNotEnabled},
	{gpu.ErrInvalidPTX, cuda.ErrInvalidPTX},
	{gpu.ErrInvalidHandle, cuda.ErrInvalidHandle},
	{gpu.ErrNotFound, cuda.ErrNotFound},
	{gpu.ErrNotReady, cuda.ErrNotReady},
	{gpu.ErrIllegalAddress, cuda.ErrIllegalAddress},
	{gpu.ErrLaunchOutOfRes, cuda.ErrLaunchOutOfRes},
	{gpu.ErrLaunchTimeout, cuda.ErrLaunchTimeout},
	{gpu.ErrMisalignedAddress, cuda.ErrMisalignedAddress},
	{gpu.ErrLaunchFailed, cuda.ErrLaunchFailed},
	{gpu.ErrNotPermitted, cuda.ErrNotPermitted},
	{gpu.ErrNotSupported, cuda.ErrNotSupported},
	{gpu.ErrStreamCapture, cuda.ErrStreamCapture},
	{gpu.ErrUnknown, cuda.ErrUnknown},
}

func TestStatusesAgree(t *testing.T) {
	for _, s := range statuses {
		t.Run(s.c.Name(), func(t *testing.T) {
			if int32(s.g) != int32(s.c) {
				t.Fatalf("gpu %d, cuda %d", int32(s.g), int32(s.c))
			}
			if s.g.Error() != s.c.Name() {
				t.Errorf("gpu names it %q, cuda %q", s.g.Error(), s.c.Name())
			}
			if ds, ok := cuda.Check("cuTest", cuda.Result(s.g)).(*cuda.Error); !ok || ds.Code != s.c {
				t.Fatalf("Check: %v", ds)
			}
		})
	}
}

// A driver error from the binding, wrapped as the layers above wrap it,
// matches gpu's sentinel of its number and no other; gpu's errors match
// the binding's sentinels the same way.
func TestDriverErrorsMatchGPUCodes(t *testing.T) {
	for _, s := range statuses {
		t.Run(s.c.Name(), func(t *testing.T) {
			fromDriver := fmt.Errorf("pool: grow: %w", cuda.Check("cuMemAllocAsync", s.c))
			fromSim := fmt.Errorf("pool: grow: %w", &gpu.Error{Op: "cuMemAllocAsync", Code: s.g})
			for _, m := range []struct {
				what   string
				err    error
				target error
			}{
				{"*cuda.Error is gpu.Code", fromDriver, s.g},
				{"cuda.Result is gpu.Code", s.c, s.g},
				{"*gpu.Error is cuda.Result", fromSim, s.c},
				{"gpu.Code is cuda.Result", s.g, s.c},
				{"*cuda.Error is cuda.Result", fromDriver, s.c},
				{"*gpu.Error is gpu.Code", fromSim, s.g},
			} {
				if !errors.Is(m.err, m.target) {
					t.Errorf("%s: errors.Is(%v, %v) = false", m.what, m.err, m.target)
				}
			}
			for _, o := range statuses {
				if o.g == s.g {
					continue
				}
				if errors.Is(fromDriver, o.g) || errors.Is(fromSim, o.c) || errors.Is(s.c, o.g) {
					t.Errorf("%s matches %s", s.c.Name(), o.c.Name())
				}
			}
			for _, other := range []error{gpu.ErrNoDriver, gpu.ErrDestroyed, gpu.ErrWrongDevice} {
				if errors.Is(fromDriver, other) {
					t.Errorf("%v matches %v", fromDriver, other)
				}
			}
		})
	}
}

// The not-ready answer of a query is polled on hot paths: matching it
// against gpu's sentinel must not allocate, as against cuda's.
func TestNotReadyMatchDoesNotAllocate(t *testing.T) {
	err := cuda.Check("cuEventQuery", cuda.ErrNotReady)
	var ok bool
	allocs := testing.AllocsPerRun(1000, func() {
		ok = errors.Is(err, gpu.ErrNotReady)
	})
	if !ok {
		t.Fatalf("errors.Is(%v, gpu.ErrNotReady) = false", err)
	}
	if allocs != 0 {
		t.Errorf("errors.Is(%v, gpu.ErrNotReady) allocates %v times, want 0", err, allocs)
	}
}
