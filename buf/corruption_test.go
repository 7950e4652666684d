package buf_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu/kernels"
)

// TestCorruptionWithoutTracking makes real the pitfall of freeing memory
// that a kernel on another stream still uses: a long kernel on S1 writes a
// buffer that its owner frees on S2 without ordering;
// the next allocation on S2 gets the same memory at once, is filled, and
// the late kernel overwrites it. Untracked, the new owner's data is
// corrupted; tracked, Close makes S2 wait for the kernel and the data is
// intact.
//
// On the GPU (STREAMALLOC_DEVICE=cuda) S1 is held by sa_spin for 50 ms,
// and both halves run. On the simulator S1 is held by sim.Hold; the
// untracked half is a real data race between two stream workers there, so
// it runs only without -race; the tracked half always runs.
func TestCorruptionWithoutTracking(t *testing.T) {
	const n = 1 << 20 // words
	for _, tracked := range []bool{false, true} {
		name := "untracked"
		if tracked {
			name = "tracked"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			if !tracked && e.sd != nil && raceEnabled {
				t.Skip("the untracked half is a data race on the simulator; it runs without -race and on the GPU")
			}
			k, err := kernels.Load(e.dev)
			must(t, err)
			s1, s2 := e.stream(), e.stream()
			var opts []buf.Option
			if !tracked {
				opts = append(opts, buf.Untracked())
			}
			a, err := buf.NewVector[uint32](e.res, n, s2, opts...)
			must(t, err)
			must(t, s2.Synchronize()) // the allocation is done: only the free is at issue
			// The long kernel: a 50 ms spin on the GPU; on the
			// simulator a Hold, released below, so that the order of
			// the two fills does not depend on the host's speed.
			release := e.hold(s1)
			must(t, a.Use(s1, buf.Write, func() error { return k.Fill(s1, a.Ptr(), n, 1000) }))
			old := a.Ptr()
			must(t, a.Close()) // on S2: tracked, it waits for S1's kernel

			b, err := buf.NewVector[uint32](e.res, n, s2, opts...)
			must(t, err)
			if b.Ptr() != old {
				// Only the untracked half needs the reuse to show
				// anything; the tracked half holds either way.
				if !tracked {
					t.Fatalf("the pool did not hand the freed memory to the next allocation (%#x, then %#x): the test cannot show reuse",
						uint64(old), uint64(b.Ptr()))
				}
				t.Logf("no reuse (%#x, then %#x)", uint64(old), uint64(b.Ptr()))
			}
			errs, err := buf.NewVector[uint32](e.res, 1, s2)
			must(t, err)
			must(t, errs.Memset(0))
			must(t, b.Use(s2, buf.Write, func() error { return k.Fill(s2, b.Ptr(), n, 7) }))
			if !tracked {
				// The new owner's fill is done while the kernel still
				// holds S1. (Tracked, S2 waits for S1: no sync here.)
				must(t, s2.Synchronize())
			}
			release()
			must(t, s1.Synchronize()) // the late kernel has finished
			must(t, buf.UseAll(s2, []buf.Operand{{Buf: b.Buffer(), Access: buf.Read}, {Buf: errs.Buffer(), Access: buf.ReadWrite}},
				func() error { return k.Check(s2, b.Ptr(), n, 7, errs.Ptr()) }))
			got := make([]uint32, 1)
			must(t, errs.CopyToHost(got))
			must(t, s2.Synchronize())
			t.Logf("%s: %d of %d words of the new owner overwritten", name, got[0], n)
			if tracked && got[0] != 0 {
				t.Fatalf("tracking did not prevent the corruption: %d words overwritten", got[0])
			}
			if !tracked && got[0] == 0 {
				t.Fatalf("no corruption without tracking: the hazard did not happen")
			}
			must(t, b.Close())
			must(t, errs.Close())
		})
	}
}
