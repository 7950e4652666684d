package gpu_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// TestWrongThreadMatchesDestroyed: a per-thread stream seen from another
// thread is as good as destroyed there, so fallbacks for destroyed
// streams apply; the reverse does not hold.
func TestWrongThreadMatchesDestroyed(t *testing.T) {
	err := fmt.Errorf("use: %w", gpu.ErrWrongThread)
	if !errors.Is(err, gpu.ErrWrongThread) || !errors.Is(err, gpu.ErrDestroyed) {
		t.Fatalf("%v: want it to match ErrWrongThread and ErrDestroyed", err)
	}
	if errors.Is(gpu.ErrDestroyed, gpu.ErrWrongThread) || errors.Is(gpu.ErrForeignContext, gpu.ErrDestroyed) {
		t.Fatal("ErrDestroyed or ErrForeignContext matches what it should not")
	}
}

type noRaw struct{}

type raw struct{ h uintptr }

func (r raw) Raw() uintptr { return r.h }

func TestRawOf(t *testing.T) {
	for _, c := range []struct {
		h    any
		want uintptr
		ok   bool
	}{{nil, 0, false}, {noRaw{}, 0, false}, {raw{0x2}, 0x2, true}, {raw{0}, 0, true}} {
		if got, ok := gpu.RawOf(c.h); got != c.want || ok != c.ok {
			t.Errorf("RawOf(%#v) = %#x, %v; want %#x, %v", c.h, got, ok, c.want, c.ok)
		}
	}
}
