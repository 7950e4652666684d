package buf_test

import (
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
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
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dev: dev, sd: dev.(*sim.Device), res: res}
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
