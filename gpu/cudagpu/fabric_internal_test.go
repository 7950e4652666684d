package cudagpu

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
)

// fabricRefusal reads a refusal of either call of the fabric question
// alike: no IMEX channel and no fabric memory on the device are definite
// answers, matching gpu.ErrNotPermitted and gpu.ErrNotSupported; anything
// else is a failure of the question, wrapped as it came. No driver is
// needed: the reading is of the error alone.
func TestFabricRefusal(t *testing.T) {
	d := &Device{ordinal: 3}
	for _, c := range []struct {
		code     cuda.Result
		definite bool
		want     error
	}{
		{cuda.ErrNotPermitted, true, gpu.ErrNotPermitted},
		{cuda.ErrNotSupported, true, gpu.ErrNotSupported},
		{cuda.ErrInvalidValue, true, gpu.ErrNotSupported},
		{cuda.ErrOutOfMemory, false, gpu.ErrOutOfMemory},
	} {
		for _, what := range []string{"granularity", "a granule"} {
			in := &cuda.Error{Op: "cuMemGetAllocationGranularity", Code: c.code}
			definite, err := d.fabricRefusal(what, in)
			if definite != c.definite || !errors.Is(err, c.want) {
				t.Errorf("%s refused with %v: definite %v, %v; want %v, an error matching %v", what, c.code, definite, err, c.definite, c.want)
			}
		}
	}
}
