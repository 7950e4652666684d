package sim_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// fixture is a fresh simulated device with a stream and the kernels.
type fixture struct {
	t   *testing.T
	dev gpu.Device
	sd  *sim.Device
	s   gpu.Stream
	k   *kernels.Kernels
}

func newFixture(t *testing.T, cfg sim.Config) *fixture {
	t.Helper()
	dev, err := sim.New(cfg).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, dev: dev, sd: dev.(*sim.Device)}
	f.s = f.stream()
	f.k, err = kernels.Load(dev)
	f.must(err)
	return f
}

func (f *fixture) must(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) stream() gpu.Stream {
	f.t.Helper()
	s, err := f.dev.NewStream()
	f.must(err)
	return s
}

func (f *fixture) event(timing bool) gpu.Event {
	f.t.Helper()
	e, err := f.dev.NewEvent(timing)
	f.must(err)
	return e
}

func (f *fixture) mallocAsync(size int, s gpu.Stream) gpu.DevicePtr {
	f.t.Helper()
	p, err := f.dev.MallocAsync(size, s)
	f.must(err)
	return p
}

func (f *fixture) attr(p gpu.MemPool, a gpu.PoolAttr) uint64 {
	f.t.Helper()
	v, err := p.Attribute(a)
	f.must(err)
	return v
}

func (f *fixture) defaultPool() gpu.MemPool {
	f.t.Helper()
	p, err := f.dev.DefaultMemPool()
	f.must(err)
	return p
}

func (f *fixture) free() uint64 {
	f.t.Helper()
	free, _, err := f.dev.MemGetInfo()
	f.must(err)
	return free
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got %v, want an error matching %v", what, err, target)
	}
}
