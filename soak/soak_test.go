package soak_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/soak"
)

// A short soak on the test device (the simulator unless
// STREAMALLOC_DEVICE says otherwise): 16 goroutines through Pool over
// Async, raw and handed-off allocations and buffers, for a second and a
// half. Nothing corrupted, nothing leaked, the counters consistent, every
// path taken, a sample per interval, and host memory steady.
func TestSoak(t *testing.T) {
	var log bytes.Buffer
	res, err := soak.Run(context.Background(), testdev.Device(t), soak.Options{
		Duration: 1500 * time.Millisecond, Interval: 250 * time.Millisecond, MaxSize: 1 << 20, Log: &log,
	})
	t.Logf("\n%s", log.String())
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() {
		t.Fatalf("soak failed: %+v", res)
	}
	if res.Raw == 0 || res.HandedOff == 0 || res.Buffers == 0 {
		t.Errorf("a path was never taken: %d raw, %d handed off, %d buffers", res.Raw, res.HandedOff, res.Buffers)
	}
	if res.Pool.CrossStreamFrees == 0 || res.Goroutines != 16 {
		t.Errorf("no cross-stream free with %d goroutines: %+v", res.Goroutines, res.Pool)
	}
	if len(res.Samples) < 5 || !strings.Contains(log.String(), "verdict: OK") {
		t.Errorf("%d samples; log:\n%s", len(res.Samples), log.String())
	}
	// Host memory stays steady: on the simulator device memory is host
	// memory, committed as the pool's chunks are first touched, so the
	// heap is bounded by what the pool reserves and a margin.
	for _, sm := range res.Samples[1:] {
		if sm.HeapBytes > sm.ReservedBytes+64<<20 {
			t.Errorf("at %v the heap was %d bytes, with %d reserved", sm.Elapsed, sm.HeapBytes, sm.ReservedBytes)
		}
	}
}

// overlapping is a broken resource: it hands out addresses 4 KiB apart
// in one region, so that allocations larger than that overlap, and frees
// nothing until it is closed.
type overlapping struct {
	dev  gpu.Device
	base gpu.DevicePtr
	mu   sync.Mutex
	next int
}

func (o *overlapping) Device() gpu.Device { return o.dev }
func (o *overlapping) Allocate(n int, s gpu.Stream) (gpu.DevicePtr, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.next = (o.next + 1) % 256
	return o.base + gpu.DevicePtr(o.next*4096), nil
}
func (o *overlapping) Deallocate(gpu.DevicePtr, int, gpu.Stream) error { return nil }

// The soak's checks can fail: over a resource whose allocations overlap,
// a later fill overwrites the words of an allocation still live, and the
// run counts the words its checks find wrong and fails. (One goroutine:
// with two, the simulator would report the overlap as a data race between
// their streams, as it should.)
func TestSoakFindsCorruption(t *testing.T) {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := soak.Run(context.Background(), dev, soak.Options{
		Duration: 300 * time.Millisecond, Goroutines: 1, MinSize: 64 << 10, MaxSize: 64 << 10,
		Stack: func(dev gpu.Device) (mr.Resource, func() error, error) {
			base, err := dev.Malloc(2 << 20)
			if err != nil {
				return nil, nil, err
			}
			return &overlapping{dev: dev, base: base}, func() error { return dev.Free(base) }, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.CorruptedWords == 0 || res.OK() {
		t.Errorf("corruption not found: %d words, OK %v", res.CorruptedWords, res.OK())
	}
}

// The device-memory check can fail: a stack that keeps 2 MiB of the
// device (one page of the simulator's, and the driver's, allocation
// granularity) after it is closed, a driver allocation its close forgets,
// is found as device memory not returned, though its own accounting
// returns everything. The warm-up builds and closes the stack once before
// the baseline, so the page it keeps then is in the baseline, and the
// run's own is what the check finds, to the byte.
func TestSoakFindsDeviceLeak(t *testing.T) {
	const leak = 2 << 20
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	builds := 0
	res, err := soak.Run(context.Background(), dev, soak.Options{
		Duration: 200 * time.Millisecond, Goroutines: 4, MaxSize: 64 << 10,
		Stack: func(dev gpu.Device) (mr.Resource, func() error, error) {
			builds++
			async, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
			if err != nil {
				return nil, nil, err
			}
			pool, err := mr.NewPool(async, mr.PoolOptions{})
			if err != nil {
				return nil, nil, errors.Join(err, async.Close())
			}
			if _, err := dev.Malloc(leak); err != nil {
				return nil, nil, errors.Join(err, pool.Close(), async.Close())
			}
			return pool, func() error { return errors.Join(pool.Close(), async.Close()) }, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if builds != 2 {
		t.Errorf("the stack was built %d times, want 2 (warm-up and run)", builds)
	}
	if res.DeviceBytesNotReturned != leak || res.LeakedBytes != 0 || res.CorruptedWords != 0 || !res.CountersAgree || res.OK() {
		t.Errorf("leak of %d bytes: %d device bytes not returned, %d leaked, %d corrupted, counters agree %v, OK %v",
			leak, res.DeviceBytesNotReturned, res.LeakedBytes, res.CorruptedWords, res.CountersAgree, res.OK())
	}
}
