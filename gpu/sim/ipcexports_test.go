package sim

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// exported reports whether the exports hold an event or a legacy
// allocation under id.
func exported(id uint64) (event, mem bool) {
	exports.mu.Lock()
	defer exports.mu.Unlock()
	_, event = exports.events[id]
	_, mem = exports.mems[id]
	return event, mem
}

// TestExportsDropDestroyed: freeing an allocation exported with
// cuIpcGetMemHandle (synchronously or in stream order) drops its entry and
// its handle no longer opens; a destroyed event stays importable until
// maxDestroyedEvents later destroys, then is dropped.
func TestExportsDropDestroyed(t *testing.T) {
	dev := func() *Device {
		d, err := New(Config{}).Device(0)
		if err != nil {
			t.Fatal(err)
		}
		return d.(*Device)
	}
	exp, imp := dev(), dev()

	t.Run("event", func(t *testing.T) {
		ev, err := exp.NewIPCEvent()
		if err != nil {
			t.Fatal(err)
		}
		h, err := exp.ExportEvent(ev)
		if err != nil {
			t.Fatal(err)
		}
		id := ev.(*event).exportID
		if _, err := exp.ExportEvent(ev); err != nil {
			t.Fatalf("exporting it again: %v", err)
		}
		if e, _ := exported(id); !e {
			t.Fatal("an exported event is not in the exports")
		}
		if _, err := imp.ImportEvent(h); err != nil {
			t.Fatalf("importing a live event: %v", err)
		}
		if err := ev.Destroy(); err != nil {
			t.Fatal(err)
		}
		if _, err := exp.ExportEvent(ev); !errors.Is(err, gpu.ErrDestroyed) {
			t.Errorf("exporting a destroyed event: %v, want ErrDestroyed", err)
		}
		// A recently destroyed event still opens: a peer may open it as
		// the exporter gives up.
		if _, err := imp.ImportEvent(h); err != nil {
			t.Errorf("importing a just destroyed event: %v", err)
		}
		for range maxDestroyedEvents {
			ev, err := exp.NewIPCEvent()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := exp.ExportEvent(ev); err != nil {
				t.Fatal(err)
			}
			if err := ev.Destroy(); err != nil {
				t.Fatal(err)
			}
		}
		if e, _ := exported(id); e {
			t.Errorf("an event destroyed %d destroys ago is still in the exports", maxDestroyedEvents)
		}
		if _, err := imp.ImportEvent(h); !errors.Is(err, gpu.ErrInvalidValue) {
			t.Errorf("importing an event destroyed long ago: %v, want ErrInvalidValue", err)
		}
		exports.mu.Lock()
		n := len(exports.destroyed)
		exports.mu.Unlock()
		if n > maxDestroyedEvents {
			t.Errorf("%d destroyed events kept, want at most %d", n, maxDestroyedEvents)
		}
	})

	for _, c := range []struct {
		name string
		free func(p gpu.DevicePtr) error
	}{
		{"mem Free", exp.Free},
		{"mem FreeAsync", func(p gpu.DevicePtr) error {
			s, err := exp.NewStream()
			if err != nil {
				return err
			}
			if err := exp.FreeAsync(p, s); err != nil {
				return err
			}
			if err := s.Synchronize(); err != nil {
				return err
			}
			return s.Destroy()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := exp.Malloc(4096)
			if err != nil {
				t.Fatal(err)
			}
			h, err := exp.ExportMem(p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := exp.ExportMem(p); err != nil {
				t.Fatalf("exporting it again: %v", err)
			}
			w, _ := parse64(h, tagMem, 1)
			if _, m := exported(w[0]); !m {
				t.Fatal("an exported allocation is not in the exports")
			}
			if err := c.free(p); err != nil {
				t.Fatal(err)
			}
			if _, m := exported(w[0]); m {
				t.Error("a freed allocation is still in the exports")
			}
			if _, err := imp.OpenMem(h); !errors.Is(err, gpu.ErrInvalidValue) {
				t.Errorf("opening a freed allocation's handle: %v, want ErrInvalidValue", err)
			}
		})
	}
}
