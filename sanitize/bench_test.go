package sanitize_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/bench"
	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/sanitize"
)

// The sanitizer's overhead, measured three ways:
//   - over a resource that does nothing (fakeRes), so the figure is the
//     sanitizer's own cost per allocate+free pair and per declared use;
//   - over the async resource on the simulator, as a program would run;
//   - through tracked buffers (a use on alternating streams: waits,
//     records, and the sanitizer seeing all of them).
// Each with full stacks (16 frames) and without (StackDepth -1).

var benchOpts = []struct {
	name string
	on   bool
	opts sanitize.Options
}{
	{"plain", false, sanitize.Options{}},
	{"sanitized", true, sanitize.Options{OnReport: func(*sanitize.Report) {}}},
	{"sanitized-nostack", true, sanitize.Options{OnReport: func(*sanitize.Report) {}, StackDepth: -1}},
}

func BenchmarkAllocFreeFake(b *testing.B) {
	for _, bo := range benchOpts {
		b.Run(bo.name, func(b *testing.B) {
			var res mr.Resource = newFakeRes()
			if bo.on {
				res = sanitize.Wrap(res, bo.opts)
			}
			s := newFakeStream()
			bench.Pair(b, res, s, 4096)
		})
	}
}

func BenchmarkUseFake(b *testing.B) {
	for _, bo := range benchOpts[1:] {
		b.Run(bo.name, func(b *testing.B) {
			res := sanitize.Wrap(newFakeRes(), bo.opts)
			z := res.Sanitizer()
			s1, s2 := newFakeStream(), newFakeStream()
			p, _ := res.Allocate(4096, s1)
			must(b, z.Synchronize(s1))
			b.ReportAllocs()
			for b.Loop() {
				if err := z.Use(p, 4096, s1, buf.Read); err != nil {
					b.Fatal(err)
				}
				if err := z.Use(p, 4096, s2, buf.Read); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// simAsync returns a simulated device and an Async resource on a pool of
// its own, both behind a sanitizer when bo.on; the resource is closed
// when b ends.
func simAsync(b *testing.B, on bool, opts sanitize.Options) (gpu.Device, mr.Resource) {
	b.Helper()
	dev, err := sim.New(sim.Config{}).Device(0)
	must(b, err)
	var z *sanitize.Sanitizer
	if on {
		z = sanitize.New(opts)
		dev = z.Device(dev)
	}
	a, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	must(b, err)
	b.Cleanup(func() { a.Close() })
	if on {
		return dev, z.Resource(a)
	}
	return dev, a
}

// simStream returns a stream of dev, destroyed when b ends.
func simStream(b *testing.B, dev gpu.Device) gpu.Stream {
	b.Helper()
	s, err := dev.NewStream()
	must(b, err)
	b.Cleanup(func() { s.Destroy() })
	return s
}

func BenchmarkAllocFreeAsyncSim(b *testing.B) {
	for _, bo := range benchOpts {
		b.Run(bo.name, func(b *testing.B) {
			dev, res := simAsync(b, bo.on, bo.opts)
			s := simStream(b, dev)
			bench.Pair(b, res, s, 4096)
			must(b, s.Synchronize())
		})
	}
}

func BenchmarkBufferUseSim(b *testing.B) {
	for _, bo := range benchOpts {
		b.Run(bo.name, func(b *testing.B) {
			dev, res := simAsync(b, bo.on, bo.opts)
			s1, s2 := simStream(b, dev), simStream(b, dev)
			v, err := buf.New(res, 4096, s1)
			must(b, err)
			noop := func() error { return nil }
			b.ReportAllocs()
			for b.Loop() {
				if err := v.Use(s1, buf.Write, noop); err != nil {
					b.Fatal(err)
				}
				if err := v.Use(s2, buf.Read, noop); err != nil {
					b.Fatal(err)
				}
			}
			must(b, v.Close())
			must(b, dev.Synchronize())
		})
	}
}
