package gpu_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

func TestCodeNames(t *testing.T) {
	for _, tt := range []struct {
		code gpu.Code
		want string
	}{
		{gpu.ErrInvalidValue, "CUDA_ERROR_INVALID_VALUE"},
		{gpu.ErrOutOfMemory, "CUDA_ERROR_OUT_OF_MEMORY"},
		{gpu.ErrNotReady, "CUDA_ERROR_NOT_READY"},
		{gpu.ErrIllegalAddress, "CUDA_ERROR_ILLEGAL_ADDRESS"},
		{gpu.ErrStreamCapture, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"},
		{gpu.Code(12345), "CUresult(12345)"},
	} {
		if got := tt.code.Error(); got != tt.want {
			t.Errorf("Code(%d).Error() = %q, want %q", int32(tt.code), got, tt.want)
		}
		if got := tt.code.DriverCode(); got != int32(tt.code) {
			t.Errorf("Code(%d).DriverCode() = %d", int32(tt.code), got)
		}
	}
	e := &gpu.Error{Op: "cuMemAllocAsync", Code: gpu.ErrOutOfMemory}
	if got, want := e.Error(), "cuMemAllocAsync: CUDA_ERROR_OUT_OF_MEMORY (2)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// foreignStatus is a driver status of another package, as the driver
// binding's Result is: it gives its number through DriverCode.
type foreignStatus int32

func (f foreignStatus) Error() string     { return fmt.Sprintf("foreign %d", int32(f)) }
func (f foreignStatus) DriverCode() int32 { return int32(f) }

func TestErrorMatching(t *testing.T) {
	oom := fmt.Errorf("pool: grow: %w", &gpu.Error{Op: "cuMemAllocAsync", Code: gpu.ErrOutOfMemory})
	for _, tt := range []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"wrapped *Error is its Code", oom, gpu.ErrOutOfMemory, true},
		{"wrapped *Error is not another Code", oom, gpu.ErrInvalidValue, false},
		{"wrapped *Error is a foreign status of its number", oom, foreignStatus(2), true},
		{"wrapped *Error is not a foreign status of another number", oom, foreignStatus(1), false},
		{"Code is a foreign status of its number", gpu.ErrNotReady, foreignStatus(600), true},
		{"Code is not another Code", gpu.ErrNotReady, gpu.ErrNotFound, false},
		{"*Error is not a backend error", oom, gpu.ErrDestroyed, false},
		{"backend errors are distinct", gpu.ErrDestroyed, gpu.ErrWrongDevice, false},
		{"no driver is not a status", gpu.ErrNoDriver, gpu.ErrNoDevice, false},
		{"no status is ErrNoDriver", gpu.ErrNoDevice, gpu.ErrNoDriver, false},
	} {
		if got := errors.Is(tt.err, tt.target); got != tt.want {
			t.Errorf("%s: errors.Is(%v, %v) = %v, want %v", tt.name, tt.err, tt.target, got, tt.want)
		}
	}
	var code gpu.Code
	if !errors.As(oom, &code) || code != gpu.ErrOutOfMemory {
		t.Errorf("errors.As(%v, *Code) = %v", oom, code)
	}
	var e *gpu.Error
	if !errors.As(oom, &e) || e.Op != "cuMemAllocAsync" {
		t.Errorf("errors.As(%v, **Error) = %v", oom, e)
	}
}

// A status is polled on hot paths (a not-ready query): a match must not
// allocate, whether the target is this package's or a foreign one.
func TestMatchingDoesNotAllocate(t *testing.T) {
	err := error(&gpu.Error{Op: "cuStreamQuery", Code: gpu.ErrNotReady})
	var ok bool
	allocs := testing.AllocsPerRun(1000, func() {
		ok = errors.Is(err, gpu.ErrNotReady) && errors.Is(err, foreignStatus(600))
	})
	if !ok {
		t.Fatal("a not-ready error did not match")
	}
	if allocs != 0 {
		t.Errorf("matching allocates %v times, want 0", allocs)
	}
}

func ExampleCode() {
	// A backend's error, wrapped by the layers above it.
	err := fmt.Errorf("pool: grow: %w", &gpu.Error{Op: "cuMemAllocAsync", Code: gpu.ErrOutOfMemory})
	fmt.Println(errors.Is(err, gpu.ErrOutOfMemory))
	fmt.Println(err)
	// Output:
	// true
	// pool: grow: cuMemAllocAsync: CUDA_ERROR_OUT_OF_MEMORY (2)
}
