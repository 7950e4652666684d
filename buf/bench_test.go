package buf_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/bench"
	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
)

// The cost of tracking, on the selected device (the simulator by default):
// a use with a function that enqueues nothing, on one stream and
// alternating between two, tracked and untracked; and a whole
// allocate-use-close cycle against the resource's bare pair.

func benchEnv(b *testing.B) (*env, gpu.Stream, gpu.Stream) {
	e := newEnv(b)
	return e, e.stream(), e.stream()
}

func BenchmarkUse(b *testing.B) {
	noop := func() error { return nil }
	for _, bc := range []struct {
		name      string
		untracked bool
		cross     bool
	}{
		{"tracked/same-stream", false, false},
		{"tracked/two-streams", false, true},
		{"untracked/two-streams", true, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e, s1, s2 := benchEnv(b)
			var opts []buf.Option
			if bc.untracked {
				opts = append(opts, buf.Untracked())
			}
			v := e.buffer(4096, s1, opts...)
			other := s1
			if bc.cross {
				other = s2
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := v.Use(s1, buf.Write, noop); err != nil {
					b.Fatal(err)
				}
				if err := v.Use(other, buf.Read, noop); err != nil {
					b.Fatal(err)
				}
			}
			must(b, v.Close())
			must(b, e.dev.Synchronize())
		})
	}
}

func BenchmarkCycle(b *testing.B) {
	b.Run("resource-pair", func(b *testing.B) {
		e, s, _ := benchEnv(b)
		bench.Pair(b, e.res, s, 4096)
		must(b, s.Synchronize())
	})
	b.Run("buffer-new-use-close", func(b *testing.B) {
		e, s, _ := benchEnv(b)
		noop := func() error { return nil }
		b.ReportAllocs()
		for b.Loop() {
			v, err := buf.New(e.res, 4096, s)
			if err != nil {
				b.Fatal(err)
			}
			if err := v.Use(s, buf.Write, noop); err != nil {
				b.Fatal(err)
			}
			if err := v.Close(); err != nil {
				b.Fatal(err)
			}
		}
		must(b, s.Synchronize())
	})
}
