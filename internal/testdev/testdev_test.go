package testdev_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/internal/testdev"
)

// Each subtest sets the variable itself (t.Setenv), whatever the
// environment of the run.
func TestKinds(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		t.Setenv(testdev.Env, "")
		if k := testdev.Kind(); k != "sim" {
			t.Fatalf("Kind() = %q, want sim", k)
		}
		b := testdev.Backend(t)
		if b.Name() != "sim" || !b.Simulated() {
			t.Errorf("default backend %s", b.Name())
		}
		if b2 := testdev.Backend(t); b2 == b {
			t.Error("two simulators share state")
		}
		d := testdev.Device(t)
		if !d.Properties().Simulated {
			t.Error("default device is not simulated")
		}
	})
	t.Run("cuda", func(t *testing.T) {
		t.Setenv(testdev.Env, "cuda")
		n, err := 0, cuda.Init()
		if err == nil {
			n, err = cuda.DeviceCount()
		}
		usable := err == nil && n > 0
		ft := &fatalRecorder{TB: t}
		var b gpu.Backend
		func() {
			defer func() { _ = recover() }()
			b = testdev.Backend(ft)
		}()
		switch {
		case usable && (ft.failed || b == nil || b.Name() != "cuda"):
			t.Errorf("with a GPU: backend %v, failed %v", b, ft.failed)
		case !usable && !ft.failed:
			t.Errorf("without a GPU (%v), %s=cuda did not fail the test", err, testdev.Env)
		}
	})
	t.Run("unknown", func(t *testing.T) {
		t.Setenv(testdev.Env, "tpu")
		ft := &fatalRecorder{TB: t}
		func() {
			defer func() { _ = recover() }()
			testdev.Backend(ft)
		}()
		if !ft.failed {
			t.Error("an unknown kind did not fail the test")
		}
	})
}

// fatalRecorder records a Fatalf instead of ending the test; it stops the
// caller with a panic that the test recovers.
type fatalRecorder struct {
	testing.TB
	failed bool
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.failed = true
	panic("fatal")
}

func (f *fatalRecorder) Helper() {}
