package devarena

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// testBadInput: every bad argument is its typed error, and none of them
// allocates anything.
func testBadInput(t *testing.T, dev, other gpu.Device) {
	s := newStream(t, dev)
	otherStream := newStream(t, other)
	g := newGuarded(dev)
	for _, tc := range []struct {
		name string
		res  mr.Resource
		s    gpu.Stream
		cfg  Config
		want error
	}{
		{"zero size", g, s, Config{Size: 0}, ErrInvalidSize},
		{"negative size", g, s, Config{Size: -1}, ErrInvalidSize},
		{"absurd size", g, s, Config{Size: MaxSize + 1}, ErrInvalidSize},
		{"align 4", g, s, Config{Size: 64, Align: 4}, ErrInvalidAlign},
		{"align 12", g, s, Config{Size: 64, Align: 12}, ErrInvalidAlign},
		{"align negative", g, s, Config{Size: 64, Align: -8}, ErrInvalidAlign},
		{"align too large", g, s, Config{Size: 64, Align: 2 * MaxAlign}, ErrInvalidAlign},
		{"nil resource", nil, s, Config{Size: 64}, gpu.ErrInvalidHandle},
		{"nil stream", g, nil, Config{Size: 64}, gpu.ErrInvalidHandle},
		{"stream of another device", g, otherStream, Config{Size: 64}, gpu.ErrWrongDevice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(tc.res, tc.s, tc.cfg)
			if !errors.Is(err, tc.want) || a != nil {
				t.Errorf("New = %v, %v; want nil, %v", a, err, tc.want)
			}
			if tc.res == g && tc.s == s {
				if _, err := NewSet(tc.res, tc.cfg); !errors.Is(err, tc.want) {
					t.Errorf("NewSet: %v, want %v", err, tc.want)
				}
			}
			if n := g.liveBlocks(); n != 0 {
				t.Errorf("%d blocks allocated by a refused New", n)
			}
		})
	}
	if errors.Is(ErrInvalidSize, mr.ErrInvalidSize) != true {
		t.Error("ErrInvalidSize does not match mr.ErrInvalidSize")
	}
	if _, err := NewSet(nil, Config{Size: 64}); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("NewSet(nil): %v", err)
	}
	set, err := NewSet(g, Config{Size: 64})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.For(nil); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("For(nil): %v", err)
	}
	if _, err := set.For(otherStream); !errors.Is(err, gpu.ErrWrongDevice) {
		t.Errorf("For(other device's stream): %v", err)
	}
	if set.Len() != 0 || g.liveBlocks() != 0 {
		t.Errorf("refused For left %d arenas, %d blocks", set.Len(), g.liveBlocks())
	}
	if err := set.Close(); err != nil {
		t.Errorf("close empty set: %v", err)
	}

	// The kernels' own checks.
	k := loadKernels(t, dev)
	a := newArena(t, g, s, Config{Size: 4096})
	defer closeArena(t, g, a)
	out, err := dev.MallocAsync(64, s)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.FreeAsync(out, s)
	kOther := loadKernels(t, other)
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"tag nil arena", k.Tag(s, nil, out, 1, 1), gpu.ErrInvalidHandle},
		{"tag negative n", k.Tag(s, a, out, -1, 1), gpu.ErrInvalidValue},
		{"tag span 0", k.Tag(s, a, out, 1, 0), gpu.ErrInvalidValue},
		{"tag span too large", k.Tag(s, a, out, 1, MaxSpan+1), gpu.ErrInvalidValue},
		{"tag null output", k.Tag(s, a, 0, 1, 1), gpu.ErrInvalidValue},
		{"tag arena of another device", kOther.Tag(otherStream, a, out, 1, 1), gpu.ErrWrongDevice},
		{"bump nil arena", k.Bump(s, nil, 1, 8), gpu.ErrInvalidHandle},
		{"bump negative n", k.Bump(s, a, -1, 8), gpu.ErrInvalidValue},
		{"bump negative bytes", k.Bump(s, a, 1, -8), gpu.ErrInvalidValue},
		{"load on nil device", func() error { _, err := LoadKernels(nil); return err }(), gpu.ErrInvalidHandle},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	if st, err := a.Stats(); err != nil || st != (Stats{}) {
		t.Errorf("refused launches touched the arena: %+v, %v", st, err)
	}
}

// testCloseFailure: a free that fails leaves the arena open and its memory
// held; Close can be retried. A Set keeps such an arena for its next Close.
func testCloseFailure(t *testing.T, dev gpu.Device) {
	s := newStream(t, dev)
	g := newGuarded(dev)
	a := newArena(t, g, s, Config{Size: 1024})
	g.mu.Lock()
	g.failFree = 1
	g.mu.Unlock()
	if err := a.Close(); !errors.Is(err, errInjected) {
		t.Fatalf("Close with a failing free: %v, want the injected error", err)
	}
	if a.Closed() || g.liveBlocks() != 1 {
		t.Fatalf("after a failed Close: closed %v, %d live blocks; want open, 1", a.Closed(), g.liveBlocks())
	}
	if _, err := a.Stats(); err != nil {
		t.Errorf("Stats after a failed Close: %v", err)
	}
	closeArena(t, g, a)

	set, err := NewSet(g, Config{Size: 1024})
	if err != nil {
		t.Fatal(err)
	}
	s2 := newStream(t, dev)
	for _, st := range []gpu.Stream{s, s2} {
		if _, err := set.For(st); err != nil {
			t.Fatal(err)
		}
	}
	g.mu.Lock()
	g.failFree = 1
	g.mu.Unlock()
	if err := set.Close(); !errors.Is(err, errInjected) {
		t.Fatalf("set Close with one failing free: %v", err)
	}
	if set.Len() != 1 || g.liveBlocks() != 1 {
		t.Fatalf("after a half-failed Close: %d arenas, %d blocks; want 1, 1", set.Len(), g.liveBlocks())
	}
	if _, err := set.For(s); !errors.Is(err, ErrClosed) {
		t.Errorf("For on a closing set: %v, want ErrClosed", err)
	}
	if err := set.Close(); err != nil {
		t.Fatalf("retried set Close: %v", err)
	}
	if err := dev.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if set.Len() != 0 || g.liveBlocks() != 0 {
		t.Fatalf("after the retry: %d arenas, %d blocks", set.Len(), g.liveBlocks())
	}
	if err := set.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("third Close: %v, want ErrClosed", err)
	}
}
