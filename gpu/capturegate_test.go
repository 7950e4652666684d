package gpu_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// plainStream cannot be captured; captureOnly can, without saying whether
// the gate covers it; gated says what it is told.
type (
	plainStream struct{ gpu.Stream }
	captureOnly struct{ gpu.CaptureStream }
	gated       struct {
		gpu.CaptureStream
		covered bool
	}
)

func (g gated) CaptureGated() bool { return g.covered }

func TestCaptureGated(t *testing.T) {
	cases := []struct {
		name string
		s    gpu.Stream
		want bool
	}{
		{"nil", nil, false},
		{"cannot capture", plainStream{}, true},
		{"capture stream that says nothing", captureOnly{}, false},
		{"gated", gated{covered: true}, true},
		{"adopted", gated{covered: false}, false},
	}
	for _, c := range cases {
		if got := gpu.CaptureGated(c.s); got != c.want {
			t.Errorf("%s: CaptureGated = %v, want %v", c.name, got, c.want)
		}
	}
}

// The gate is open from the first CaptureStarted to the last matching
// CaptureFinished. (No other test of this package captures.)
func TestCapturesActive(t *testing.T) {
	if gpu.CapturesActive() {
		t.Fatal("open before any capture")
	}
	gpu.CaptureStarted()
	gpu.CaptureStarted()
	gpu.CaptureFinished()
	if !gpu.CapturesActive() {
		t.Error("closed while one of two captures is in progress")
	}
	gpu.CaptureFinished()
	if gpu.CapturesActive() {
		t.Error("open after both captures finished")
	}
}
