package mr_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/mrtest"
)

// TestAsyncViewConformance: Async over a pool it does not own (a pool of
// the caller's, and the device's current pool) passes the suite.
func TestAsyncViewConformance(t *testing.T) {
	dev := testdev.Device(t)
	if !dev.Properties().MemoryPoolsSupported {
		t.Skip("no memory pools")
	}
	t.Run("pool", func(t *testing.T) {
		mrtest.Run(t, func(tb testing.TB, dev gpu.Device) mr.Resource {
			p, err := dev.NewMemPool()
			if err != nil {
				tb.Fatal(err)
			}
			r, err := mr.NewAsync(dev, mr.AsyncOptions{Pool: p})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() {
				r.Close()
				if err := p.Destroy(); err != nil { // Close left it to us
					tb.Errorf("destroy the viewed pool: %v", err)
				}
			})
			return r
		}, dev, mrtest.Options{DetectsDoubleFree: true, Foreign: testdev.Foreign(t)})
	})
	t.Run("current", func(t *testing.T) {
		mrtest.Run(t, func(tb testing.TB, dev gpu.Device) mr.Resource {
			p, err := dev.NewMemPool()
			if err != nil {
				tb.Fatal(err)
			}
			def, err := dev.DefaultMemPool()
			if err != nil {
				tb.Fatal(err)
			}
			if err := dev.SetCurrentMemPool(p); err != nil {
				tb.Fatal(err)
			}
			r, err := mr.NewAsync(dev, mr.AsyncOptions{CurrentPool: true})
			if err != nil {
				tb.Fatal(err)
			}
			if r.Pool() != p {
				tb.Fatalf("CurrentPool: resource's pool %v, want the current pool %v", r.Pool(), p)
			}
			tb.Cleanup(func() {
				r.Close()
				if err := errors.Join(dev.SetCurrentMemPool(def), p.Destroy()); err != nil {
					tb.Errorf("restore the default pool: %v", err)
				}
			})
			return r
		}, dev, mrtest.Options{DetectsDoubleFree: true, Foreign: testdev.Foreign(t)})
	})
}

// TestAsyncForeignPool: Async over a pool another library made and the
// device adopted allocates from it and leaves it to its owner on Close.
func TestAsyncForeignPool(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	sd := dev
	raw, err := sd.NewRawMemPool()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := dev.AdoptMemPool(raw)
	if err != nil {
		t.Fatal(err)
	}
	r, err := mr.NewAsync(dev, mr.AsyncOptions{Pool: pool, ReleaseThreshold: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := dev.NewStream()
	defer s.Destroy()
	p, err := r.Allocate(1<<20, s)
	if err != nil {
		t.Fatal(err)
	}
	if used, _ := pool.Attribute(gpu.PoolUsedMemCurrent); used < 1<<20 {
		t.Fatalf("the foreign pool's used memory is %d after a 1 MiB allocation", used)
	}
	def, _ := dev.DefaultMemPool()
	if used, _ := def.Attribute(gpu.PoolUsedMemCurrent); used != 0 {
		t.Fatalf("the default pool's used memory is %d: the view allocated elsewhere", used)
	}
	if err := errors.Join(r.Deallocate(p, 1<<20, s), s.Synchronize(), r.Close()); err != nil {
		t.Fatal(err)
	}
	if th, err := pool.Attribute(gpu.PoolReleaseThreshold); err != nil || th != 1<<30 {
		t.Fatalf("after Close the foreign pool answers %d, %v; want it alive with its threshold", th, err)
	}
	if err := errors.Join(pool.Destroy(), sd.DestroyRawMemPool(raw)); err != nil {
		t.Fatalf("the owner could not destroy its pool: %v", err)
	}
}

// TestAsyncPoolChoices: the pool choices are exclusive, and a pool of
// another device is refused.
func TestAsyncPoolChoices(t *testing.T) {
	b := sim.New(sim.Config{Devices: 2})
	d0, _ := b.Device(0)
	d1, _ := b.Device(1)
	p1, _ := d1.NewMemPool()
	p0, _ := d0.NewMemPool()
	for _, c := range []struct {
		name string
		opts mr.AsyncOptions
		err  error
	}{
		{"own and given", mr.AsyncOptions{OwnPool: true, Pool: p0}, gpu.ErrInvalidValue},
		{"own and current", mr.AsyncOptions{OwnPool: true, CurrentPool: true}, gpu.ErrInvalidValue},
		{"given and current", mr.AsyncOptions{Pool: p0, CurrentPool: true}, gpu.ErrInvalidValue},
		{"another device's pool", mr.AsyncOptions{Pool: p1}, gpu.ErrWrongDevice},
	} {
		if r, err := mr.NewAsync(d0, c.opts); r != nil || !errors.Is(err, c.err) {
			t.Errorf("%s: NewAsync = %v, %v; want nil, %v", c.name, r, err, c.err)
		}
	}
}
