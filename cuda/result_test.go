package cuda_test

import (
	"errors"
	"fmt"
	"go/build"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/cuda"
)

// statusNumber is a driver status of another package (as gpu.Code is): it
// gives its CUresult number through DriverCode.
type statusNumber int32

func (s statusNumber) Error() string     { return fmt.Sprintf("status %d", int32(s)) }
func (s statusNumber) DriverCode() int32 { return int32(s) }

// A Result or *Error matches any status with its number, however wrapped,
// and nothing else.
func TestErrorsMatchStatusesByNumber(t *testing.T) {
	driverErr := fmt.Errorf("wrapped: %w", cuda.Check("cuStreamQuery", cuda.ErrNotReady))
	for _, tt := range []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"*Error, same number", driverErr, statusNumber(600), true},
		{"*Error, another number", driverErr, statusNumber(2), false},
		{"Result, same number", cuda.ErrOutOfMemory, statusNumber(2), true},
		{"Result, another number", cuda.ErrOutOfMemory, statusNumber(600), false},
		{"Result is Result", cuda.ErrOutOfMemory, cuda.ErrOutOfMemory, true},
		{"Result is not another Result", cuda.ErrOutOfMemory, cuda.ErrNotReady, false},
		{"no driver is no status", cuda.ErrNoDriver, statusNumber(100), false},
		{"a status is not a plain error", driverErr, errors.New("CUDA_ERROR_NOT_READY"), false},
	} {
		if got := errors.Is(tt.err, tt.target); got != tt.want {
			t.Errorf("%s: errors.Is(%v, %v) = %v, want %v", tt.name, tt.err, tt.target, got, tt.want)
		}
	}
	if got := cuda.ErrNotReady.DriverCode(); got != 600 {
		t.Errorf("ErrNotReady.DriverCode() = %d, want 600", got)
	}
	err := cuda.Check("cuEventQuery", cuda.ErrNotReady)
	var ok bool
	allocs := testing.AllocsPerRun(1000, func() { ok = errors.Is(err, statusNumber(600)) })
	if !ok || allocs != 0 {
		t.Errorf("matching a status by number: %v, %v allocations; want true, 0", ok, allocs)
	}
}

// The driver binding is layer 1: it imports no package of the module, so
// layers above keep their own vocabulary and match it by number.
func TestImportsNothingOfTheModule(t *testing.T) {
	for _, cgo := range []bool{true, false} {
		ctx := build.Default
		ctx.CgoEnabled = cgo
		p, err := ctx.ImportDir(".", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.GoFiles) == 0 {
			t.Fatalf("cgo %v: no Go files found: the check cannot be trusted", cgo)
		}
		for _, path := range p.Imports {
			if strings.HasPrefix(path, "github.com/streamalloc/streamalloc/") {
				t.Errorf("cgo %v: package cuda imports %s", cgo, path)
			}
		}
	}
}
