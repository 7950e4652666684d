package testdev_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/cudagpu"
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
		n := 0
		cb, err := cudagpu.Open()
		if err == nil {
			n, err = cb.DeviceCount()
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

// skipRecorder is a fatalRecorder that also records Skipf and Fatal.
type skipRecorder struct {
	fatalRecorder
	skipped bool
}

func (s *skipRecorder) Skipf(format string, args ...any) {
	s.skipped = true
	panic("skip")
}

func (s *skipRecorder) Fatal(args ...any) {
	s.failed = true
	panic("fatal")
}

// call runs f with a recorder over t and says what f did to it.
func call(t *testing.T, f func(tb testing.TB)) (failed, skipped bool) {
	r := &skipRecorder{fatalRecorder: fatalRecorder{TB: t}}
	func() {
		defer func() { _ = recover() }()
		f(r)
	}()
	return r.failed, r.skipped
}

func TestSkipWithoutGPU(t *testing.T) {
	noGPU := gpu.ErrNoDriver
	for _, tc := range []struct {
		env                   string
		err                   error
		wantFailed, wantSkips bool
	}{
		{"", nil, false, false},
		{"cuda", nil, false, false},
		{"", noGPU, false, true},
		{"sim", noGPU, false, true},
		{"auto", noGPU, false, true},
		{"cuda", noGPU, true, false},
	} {
		t.Setenv(testdev.Env, tc.env)
		failed, skipped := call(t, func(tb testing.TB) { testdev.SkipWithoutGPU(tb, tc.err) })
		if failed != tc.wantFailed || skipped != tc.wantSkips {
			t.Errorf("%s=%q, err %v: failed %v, skipped %v; want %v, %v",
				testdev.Env, tc.env, tc.err, failed, skipped, tc.wantFailed, tc.wantSkips)
		}
	}
}

func TestMust(t *testing.T) {
	var got int
	if failed, _ := call(t, func(tb testing.TB) { got = testdev.Must(7, nil)(tb) }); failed || got != 7 {
		t.Errorf("Must(7, nil) = %d, failed %v; want 7 and no failure", got, failed)
	}
	if failed, _ := call(t, func(tb testing.TB) { testdev.Must(0, gpu.ErrOutOfMemory)(tb) }); !failed {
		t.Error("Must(0, err) did not fail the test")
	}
}

// Foreign is a simulated device of its own, whatever the environment asks
// for, and never Device's.
func TestForeign(t *testing.T) {
	t.Setenv(testdev.Env, "sim")
	d, f := testdev.Device(t), testdev.Foreign(t)
	if f == d || !f.Properties().Simulated {
		t.Errorf("Foreign() = %v (simulated %v), Device() = %v", f, f.Properties().Simulated, d)
	}
	if f2 := testdev.Foreign(t); f2 == f {
		t.Error("two Foreign devices share a simulator")
	}
}
