package mr_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
)

// Copies through the driver's host pool on 8 goroutines, each with its
// own stream, checked byte for byte; the pool keeps its memory (release
// threshold) and the counts come back to zero. It runs on testdev's
// device: the GPU with STREAMALLOC_DEVICE=cuda.
func TestDriverHostPoolCopies(t *testing.T) {
	dev := testdev.Device(t)
	p, err := mr.NewDriverHostPool(dev, mr.DriverHostPoolOptions{ReleaseThreshold: math.MaxUint64})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- driverHostRounds(dev, p, g)
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Error(err)
		}
	}
	u := p.Usage()
	if u.Used != 0 || u.PeakUsed == 0 || u.Reserved == 0 || u.PeakReserved < u.Reserved {
		t.Errorf("usage after every free: %+v; want nothing used, memory kept", u)
	}
	if err := p.Trim(0); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := mr.AllocateHost[byte](p, 16, mustStream(t, dev)); !errors.Is(err, mr.ErrClosed) {
		t.Errorf("Allocate after Close: %v, want ErrClosed", err)
	}
}

func mustStream(t *testing.T, dev gpu.Device) gpu.Stream {
	t.Helper()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Synchronize(); s.Destroy() })
	return s
}

func driverHostRounds(dev gpu.Device, p *mr.DriverHostPool, g int) error {
	s, err := dev.NewStream()
	if err != nil {
		return err
	}
	defer s.Destroy()
	for i := range 20 {
		n := 1 + (g*7919+i*104729)%(256<<10)
		d, err := dev.MallocAsync(n, s)
		if err != nil {
			return err
		}
		src, err := mr.AllocateHost[byte](p, n, s)
		if err != nil {
			return err
		}
		dst, err := mr.AllocateHost[byte](p, n, s)
		if err != nil {
			return err
		}
		if err := s.Synchronize(); err != nil { // ordered memory: the host waits for s
			return err
		}
		for j := range src {
			src[j] = byte(j + i + g)
		}
		if err := dev.CopyHtoDAsync(d, src, s); err != nil {
			return err
		}
		if err := dev.CopyDtoHAsync(dst, d, s); err != nil {
			return err
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		if !bytes.Equal(src, dst) {
			return fmt.Errorf("goroutine %d round %d: %d bytes differ after the round trip", g, i, n)
		}
		for _, b := range [][]byte{src, dst} {
			if err := mr.FreeHost(p, b, s); err != nil {
				return err
			}
		}
		if err := dev.FreeAsync(d, s); err != nil {
			return err
		}
	}
	return s.Synchronize()
}

func TestDriverHostPoolBadInput(t *testing.T) {
	dev, s, _ := hostPoolDevice(t, sim.Config{})
	if _, err := mr.NewDriverHostPool(dev, mr.DriverHostPoolOptions{Location: gpu.DeviceLocation(0)}); !errors.Is(err, gpu.ErrInvalidValue) {
		t.Errorf("pool at a device: %v, want gpu.ErrInvalidValue", err)
	}
	if _, err := mr.NewDriverHostPool(nil, mr.DriverHostPoolOptions{}); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("nil device: %v, want gpu.ErrInvalidHandle", err)
	}
	p, err := mr.NewDriverHostPool(dev, mr.DriverHostPoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := mr.AllocateHost[byte](p, 8192, s)
	if err != nil {
		t.Fatal(err)
	}
	freed, err := mr.AllocateHost[byte](p, 4096, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := mr.FreeHost(p, freed, s); err != nil {
		t.Fatal(err)
	}
	_, negErr := mr.AllocateHost[byte](p, -1, s)
	zero, zeroErr := mr.AllocateHost[byte](p, 0, s)
	for _, c := range []struct {
		what string
		err  error
		want error
	}{
		{"negative size", negErr, mr.ErrInvalidSize},
		{"Go memory", mr.FreeHost(p, make([]byte, 64), s), mr.ErrUnknownPointer},
		{"a shorter slice", mr.FreeHost(p, b[:4096], s), mr.ErrSizeMismatch},
		{"double free", mr.FreeHost(p, freed, s), mr.ErrDoubleFree},
		{"nil stream", mr.FreeHost(p, b, nil), gpu.ErrInvalidHandle},
		{"allocate on a nil stream", func() error { _, err := mr.AllocateHost[byte](p, 16, nil); return err }(), gpu.ErrInvalidHandle},
		{"close with memory allocated", p.Close(), mr.ErrInUse},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want %v", c.what, c.err, c.want)
		}
	}
	if zero != nil || zeroErr != nil {
		t.Errorf("Allocate(0) = %v, %v; want nil, nil", zero, zeroErr)
	}
	if u := p.Usage(); u.Used != 8192 {
		t.Errorf("refused calls changed the usage: %+v", u)
	}
	if err := mr.FreeHost(p, b, s); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// An allocation the driver refuses for want of memory is an
// *OutOfMemoryError with the pool's usage, and reading that usage must not
// take the close lock a second time: with Close waiting for the lock (it
// keeps refusing, a slice is still allocated) a recursive read lock would
// deadlock the two.
func TestDriverHostPoolOutOfMemoryWithClose(t *testing.T) {
	dev, s, _ := hostPoolDevice(t, sim.Config{HostCapacity: 1 << 20})
	p, err := mr.NewDriverHostPool(dev, mr.DriverHostPoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held, err := mr.AllocateHost[byte](p, 4096, s)
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 2000
	errs := make(chan error, 2)
	go func() {
		for range rounds {
			_, err := mr.AllocateHost[byte](p, 2<<20, s)
			var oom *mr.OutOfMemoryError
			if !errors.As(err, &oom) || !errors.Is(err, gpu.ErrOutOfMemory) {
				errs <- fmt.Errorf("allocate past the capacity: %v, want an *mr.OutOfMemoryError", err)
				return
			}
			if oom.Requested != 2<<20 || oom.Used != 4096 {
				errs <- fmt.Errorf("OutOfMemoryError %+v: want Requested %d, Used 4096", oom, 2<<20)
				return
			}
		}
		errs <- nil
	}()
	go func() {
		for range rounds {
			if err := p.Close(); !errors.Is(err, mr.ErrInUse) {
				errs <- fmt.Errorf("close with a slice allocated: %v, want mr.ErrInUse", err)
				return
			}
		}
		errs <- nil
	}()
	timeout := time.After(20 * time.Second)
	for range 2 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatal("Allocate and Close deadlocked")
		}
	}
	if err := mr.FreeHost(p, held, s); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
