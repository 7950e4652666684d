package buf_test

import (
	"sync"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
)

// env is a simulated device, an async resource on a pool of its own, and
// streams, all released at the end of the test.
type env struct {
	t   testing.TB
	dev gpu.Device
	sd  *sim.Device
	res *mr.Async
}

func newEnv(t testing.TB) *env {
	t.Helper()
	dev := testdev.Device(t)
	res, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dev: dev, res: res}
	e.sd, _ = dev.(*sim.Device)
	t.Cleanup(func() {
		if err := dev.Synchronize(); err != nil {
			t.Errorf("synchronize at cleanup: %v", err)
		}
		if n, bytes := res.Live(); n != 0 {
			t.Errorf("%d allocations (%d bytes) still live at cleanup", n, bytes)
		}
		res.Close()
	})
	return e
}

// needSim skips a test that needs the simulator's hooks.
func (e *env) needSim() {
	e.t.Helper()
	if e.sd == nil {
		e.t.Skip("needs the simulator's test hooks")
	}
}

// hold keeps s busy until the returned function is called: the
// simulator's Hold, or on a GPU a 50 ms spin kernel.
func (e *env) hold(s gpu.Stream) func() {
	e.t.Helper()
	if e.sd != nil {
		release := e.sd.Hold(s)
		e.t.Cleanup(release)
		return release
	}
	k, err := kernels.Load(e.dev)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := k.Spin(s, 50*time.Millisecond); err != nil {
		e.t.Fatal(err)
	}
	return func() {}
}

func (e *env) stream() gpu.Stream {
	e.t.Helper()
	s, err := e.dev.NewStream()
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { s.Destroy() })
	return s
}

func (e *env) sync(s gpu.Stream) {
	e.t.Helper()
	if err := s.Synchronize(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) buffer(size int, s gpu.Stream, opts ...buf.Option) *buf.Buffer {
	e.t.Helper()
	b, err := buf.New(e.res, size, s, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// counter is an Observer that counts what buffers report.
type counter struct {
	mu                  sync.Mutex
	uses, records, wait int
	events              map[gpu.Event]bool
	refuse              error
}

func (c *counter) ObserveUse(p gpu.DevicePtr, size int, s gpu.Stream, a buf.Access) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refuse != nil {
		return c.refuse
	}
	c.uses++
	return nil
}

func (c *counter) ObserveRecord(e gpu.Event, s gpu.Stream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.records++
	if c.events == nil {
		c.events = map[gpu.Event]bool{}
	}
	c.events[e] = true
}

func (c *counter) ObserveWait(s gpu.Stream, e gpu.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wait++
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}
