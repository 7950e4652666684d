package sim

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// TestNilAdoptedStreamCapture: a nil adopted stream answers the capture
// questions without a panic, as its other methods do: not gated, not
// capturing, and its status an error matching gpu.ErrInvalidHandle.
func TestNilAdoptedStreamCapture(t *testing.T) {
	var s gpu.Stream = (*adoptedStream)(nil)
	if gpu.CaptureGated(s) {
		t.Error("CaptureGated of a nil adopted stream = true, want false")
	}
	if id := gpu.CaptureID(s); id != 0 {
		t.Errorf("CaptureID of a nil adopted stream = %d, want 0", id)
	}
	if _, err := s.(gpu.CaptureStream).CaptureStatus(); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("CaptureStatus of a nil adopted stream: %v, want ErrInvalidHandle", err)
	}
}
