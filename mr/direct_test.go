package mr_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// syncResources are the resources whose free is synchronous.
func syncResources(dev gpu.Device) []struct {
	name  string
	r     mr.Resource
	alloc sim.Op
} {
	return []struct {
		name  string
		r     mr.Resource
		alloc sim.Op
	}{
		{"direct", mr.NewDirect(dev), sim.OpMalloc},
		{"managed", mr.NewManaged(dev), sim.OpMallocManaged},
	}
}

// TestSyncResourceFreeWaits checks that a free blocks until the work that
// may use the memory, on the freeing stream and on the allocation's, is
// done.
func TestSyncResourceFreeWaits(t *testing.T) {
	for _, streams := range []string{"same stream", "cross stream"} {
		dev := resDevice(t, sim.Config{})
		for _, c := range syncResources(dev) {
			t.Run(c.name+"/"+streams, func(t *testing.T) {
				s1 := resStream(t, dev)
				s2 := s1
				if streams == "cross stream" {
					s2 = resStream(t, dev)
				}
				p, err := c.r.Allocate(4096, s1)
				if err != nil {
					t.Fatal(err)
				}
				release := dev.Hold(s1)
				done := make(chan error)
				go func() { done <- c.r.Deallocate(p, 4096, s2) }()
				select {
				case err := <-done:
					release()
					t.Fatalf("Deallocate returned (%v) while the allocation's stream was held", err)
				case <-time.After(30 * time.Millisecond):
				}
				release()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				if u := c.r.(mr.UsageReporter).Usage(); u.Used != 0 || u.Reserved != 0 || u.PeakUsed != 4096 {
					t.Errorf("usage %+v, want 0 used and reserved, peak 4096", u)
				}
			})
		}
	}
}

// TestSyncResourceFailures injects driver failures: the allocation's
// error is typed, and a failed free leaves the pointer live so a retry
// works.
func TestSyncResourceFailures(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	s := resStream(t, dev)
	for _, c := range syncResources(dev) {
		t.Run(c.name, func(t *testing.T) {
			dev.FailNext(c.alloc, 1, gpu.ErrOutOfMemory)
			_, err := c.r.Allocate(1000, s)
			var oe *mr.OutOfMemoryError
			if !errors.As(err, &oe) || oe.Resource != c.name || oe.Requested != 1000 {
				t.Fatalf("injected OOM: %v, want an *OutOfMemoryError from %s", err, c.name)
			}
			dev.FailNext(c.alloc, 1, gpu.ErrLaunchFailed)
			if _, err := c.r.Allocate(1000, s); !errors.Is(err, gpu.ErrLaunchFailed) || errors.Is(err, mr.ErrOutOfMemory) {
				t.Fatalf("injected failure: %v, want ErrLaunchFailed", err)
			}
			p, err := c.r.Allocate(1000, s)
			if err != nil {
				t.Fatal(err)
			}
			for _, op := range []sim.Op{sim.OpStreamSynchronize, sim.OpFree} {
				dev.FailNext(op, 1, gpu.ErrLaunchFailed)
				if err := c.r.Deallocate(p, 1000, s); !errors.Is(err, gpu.ErrLaunchFailed) {
					t.Fatalf("free with %v failing: %v, want ErrLaunchFailed", op, err)
				}
				if u := c.r.(mr.UsageReporter).Usage(); u.Used != 1000 {
					t.Fatalf("failed free changed Used to %d", u.Used)
				}
			}
			if err := c.r.Deallocate(p, 1000, s); err != nil {
				t.Fatalf("retried free: %v", err)
			}
		})
	}
}

// TestSyncResourceDestroyedAllocationStream frees memory whose allocation
// stream is gone: the device is synchronized instead.
func TestSyncResourceDestroyedAllocationStream(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	for _, c := range syncResources(dev) {
		t.Run(c.name, func(t *testing.T) {
			s1, err := dev.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			s2 := resStream(t, dev)
			p, err := c.r.Allocate(512, s1)
			if err != nil {
				t.Fatal(err)
			}
			if err := dev.MemsetD8Async(p, 1, 512, s1); err != nil {
				t.Fatal(err)
			}
			if err := s1.Destroy(); err != nil {
				t.Fatal(err)
			}
			if err := c.r.Deallocate(p, 512, s2); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func ExampleDirect() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()

	r := mr.NewDirect(dev)
	p, err := r.Allocate(1<<20, s)
	if err != nil {
		panic(err)
	}
	dev.MemsetD8Async(p, 0, 1<<20, s)
	// Deallocate waits for the memset before cuMemFree.
	if err := r.Deallocate(p, 1<<20, s); err != nil {
		panic(err)
	}
	fmt.Println(r.Usage().PeakUsed)
	// Output: 1048576
}

func ExampleManaged() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()

	r := mr.NewManaged(dev) // unified memory, addressable from host and device
	p, err := r.Allocate(4096, s)
	if err != nil {
		panic(err)
	}
	dev.MemsetD8Async(p, 1, 4096, s)
	r.Deallocate(p, 4096, s) // waits for the memset, then cuMemFree
	fmt.Println(r.Usage().Used)
	// Output: 0
}
