package sanitize_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/bench"
	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/sanitize"
)

// The sanitizer's overhead, measured three ways:
//   - over a resource that does nothing (fakeRes), so the figure is the
//     sanitizer's own cost per allocate+free pair and per declared use;
//   - over the async resource on the simulator, as a program would run;
//   - through tracked buffers (a use on alternating streams: waits,
//     records, and the sanitizer seeing all of them).
// Each with full stacks (16 frames) and without (StackDepth -1). The last
// two also run on the device the environment selects (the ...Device
// benchmarks: the real GPU under the GPU script), where the sanitizer's
// host-side cost is set against the driver's; on the simulator they skip,
// since the ...Sim ones measure the same there.

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
	return asyncOn(b, dev, on, opts)
}

// deviceAsync is simAsync on the device testdev selects; it skips on the
// simulator, which simAsync's benchmarks cover.
func deviceAsync(b *testing.B, on bool, opts sanitize.Options) (gpu.Device, mr.Resource) {
	b.Helper()
	if testdev.Kind() == "sim" {
		b.Skipf("measures the real device (%s=cuda); the ...Sim benchmark covers the simulator", testdev.Env)
	}
	return asyncOn(b, testdev.Device(b), on, opts)
}

// asyncOn is an Async resource on a pool of its own on dev, both behind a
// sanitizer when on; the resource is closed when b ends.
func asyncOn(b *testing.B, dev gpu.Device, on bool, opts sanitize.Options) (gpu.Device, mr.Resource) {
	b.Helper()
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

// simStream returns a stream of dev (simulated or not), destroyed when b
// ends.
func simStream(b *testing.B, dev gpu.Device) gpu.Stream {
	b.Helper()
	s, err := dev.NewStream()
	must(b, err)
	b.Cleanup(func() { s.Destroy() })
	return s
}

func BenchmarkAllocFreeAsyncSim(b *testing.B)    { allocFreeAsync(b, simAsync) }
func BenchmarkAllocFreeAsyncDevice(b *testing.B) { allocFreeAsync(b, deviceAsync) }
func BenchmarkBufferUseSim(b *testing.B)         { bufferUse(b, simAsync) }
func BenchmarkBufferUseDevice(b *testing.B)      { bufferUse(b, deviceAsync) }

type setup func(b *testing.B, on bool, opts sanitize.Options) (gpu.Device, mr.Resource)

// allocFreeAsync: an allocate+free pair of 4 KiB on one stream.
func allocFreeAsync(b *testing.B, env setup) {
	for _, bo := range benchOpts {
		b.Run(bo.name, func(b *testing.B) {
			dev, res := env(b, bo.on, bo.opts)
			s := simStream(b, dev)
			bench.Pair(b, res, s, 4096)
			must(b, s.Synchronize())
		})
	}
}

// bufferUse: a tracked buffer written on one stream and read on another,
// with no work enqueued (the cost of the waits, records and checks).
func bufferUse(b *testing.B, env setup) {
	for _, bo := range benchOpts {
		b.Run(bo.name, func(b *testing.B) {
			dev, res := env(b, bo.on, bo.opts)
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
