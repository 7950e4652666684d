// The test sees what this machine has: with a usable GPU "auto" and "cuda"
// must give the CUDA backend, without one "auto" must give the simulator
// and "cuda" the reason (no driver, no device).

package backend_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/backend"
	"github.com/streamalloc/streamalloc/gpu/cudagpu"
)

// driverUsable reports whether this machine can run the CUDA backend, and
// if not, cudagpu's reason.
func driverUsable() (bool, error) {
	b, err := cudagpu.Open()
	if err != nil {
		return false, err
	}
	n, err := b.DeviceCount()
	return err == nil && n > 0, err
}

func TestOpen(t *testing.T) {
	gpuHere, why := driverUsable()
	autoName := "sim"
	if gpuHere {
		autoName = "cuda"
	}
	type openCase struct {
		kind     string
		wantName string
		wantErr  error
	}
	tests := []openCase{
		{"sim", "sim", nil},
		{"auto", autoName, nil},
		{"", "", backend.ErrUnknownKind},
		{"gpu", "", backend.ErrUnknownKind},
		{"CUDA", "", backend.ErrUnknownKind},
	}
	if gpuHere {
		tests = append(tests, openCase{"cuda", "cuda", nil})
	} else if errors.Is(why, gpu.ErrNoDriver) {
		tests = append(tests, openCase{"cuda", "", gpu.ErrNoDriver})
	} else {
		tests = append(tests, openCase{"cuda", "", gpu.ErrNoDevice})
	}
	for _, tt := range tests {
		b, err := backend.Open(tt.kind)
		if tt.wantErr != nil {
			if b != nil || !errors.Is(err, tt.wantErr) {
				t.Errorf("Open(%q) = %v, %v; want nil, %v", tt.kind, b, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Open(%q): %v", tt.kind, err)
			continue
		}
		if b.Name() != tt.wantName || b.Simulated() != (tt.wantName == "sim") {
			t.Errorf("Open(%q) = %s (simulated %v), want %s", tt.kind, b.Name(), b.Simulated(), tt.wantName)
		}
		dev, err := b.Device(0)
		if err != nil {
			t.Errorf("Open(%q).Device(0): %v", tt.kind, err)
			continue
		}
		if dev.Properties().Simulated != b.Simulated() {
			t.Errorf("Open(%q): device simulated %v", tt.kind, dev.Properties().Simulated)
		}
	}
}

func ExampleOpen() {
	b, err := backend.Open("sim")
	if err != nil {
		panic(err)
	}
	dev, _ := b.Device(0)
	fmt.Println(b.Name(), dev.Properties().Simulated)
	// Output: sim true
}
