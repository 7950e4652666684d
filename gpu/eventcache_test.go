package gpu_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

func TestEventCache(t *testing.T) {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	c := &gpu.EventCache{Device: dev, Max: 2}
	var evs []gpu.Event
	for range 3 {
		e, err := c.Get()
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
	}
	if evs[0] == evs[1] || evs[1] == evs[2] {
		t.Fatal("Get handed out one event twice while it was in use")
	}
	for _, e := range evs {
		c.Put(e)
	}
	c.Put(nil) // ignored
	// Max is 2: the third event put back was destroyed, the first two are
	// handed out again, last in first out.
	if err := evs[2].Query(); !errors.Is(err, gpu.ErrDestroyed) {
		t.Errorf("event beyond Max: Query = %v, want ErrDestroyed", err)
	}
	for _, want := range []gpu.Event{evs[1], evs[0]} {
		if e, err := c.Get(); err != nil || e != want {
			t.Errorf("Get = %v, %v; want the cached event back", e, err)
		}
	}
	c.Put(evs[0])
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := evs[0].Query(); !errors.Is(err, gpu.ErrDestroyed) {
		t.Errorf("cached event after Close: Query = %v, want ErrDestroyed", err)
	}
	// After Close, Put destroys and Get still works.
	c.Put(evs[1])
	if err := evs[1].Query(); !errors.Is(err, gpu.ErrDestroyed) {
		t.Errorf("event put after Close: Query = %v, want ErrDestroyed", err)
	}
	e, err := c.Get()
	if err != nil {
		t.Fatalf("Get after Close: %v", err)
	}
	e.Destroy()
}
