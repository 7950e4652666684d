package mr_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

func TestPinned(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	p := mr.NewPinned(dev)
	if b, err := p.Allocate(0); b != nil || err != nil {
		t.Errorf("Allocate(0) = %v, %v", b, err)
	}
	if _, err := p.Allocate(-1); !errors.Is(err, mr.ErrInvalidSize) {
		t.Errorf("Allocate(-1): %v", err)
	}
	b, err := p.Allocate(1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 1000 || cap(b) != 1000 {
		t.Fatalf("len %d cap %d, want 1000", len(b), cap(b))
	}
	c, err := p.Allocate(3000)
	if err != nil {
		t.Fatal(err)
	}
	if u := p.Usage(); u.Used != 4000 || u.Reserved != 4000 {
		t.Errorf("usage %+v", u)
	}
	own := make([]byte, 1000)
	for _, bad := range []struct {
		name string
		b    []byte
		want error
	}{
		{"foreign slice", own, mr.ErrUnknownPointer},
		{"interior slice", b[1:], mr.ErrUnknownPointer},
		{"shorter slice", b[:999], mr.ErrSizeMismatch},
	} {
		if err := p.Free(bad.b); !errors.Is(err, bad.want) {
			t.Errorf("%s: %v, want %v", bad.name, err, bad.want)
		}
	}
	if err := p.Free(nil); err != nil {
		t.Errorf("Free(nil): %v", err)
	}
	dev.FailNext(sim.OpFreeHost, 1, gpu.ErrLaunchFailed)
	if err := p.Free(b); !errors.Is(err, gpu.ErrLaunchFailed) {
		t.Fatalf("injected failure: %v", err)
	}
	if err := p.Free(b); err != nil {
		t.Fatalf("retried free: %v", err)
	}
	if err := p.Free(b); !errors.Is(err, mr.ErrDoubleFree) {
		t.Errorf("double free: %v", err)
	}
	if err := p.Free(c); err != nil {
		t.Fatal(err)
	}
	if u := p.Usage(); u.Used != 0 || u.PeakUsed != 4000 {
		t.Errorf("usage after frees: %+v", u)
	}
	dev.FailNext(sim.OpMallocHost, 1, gpu.ErrOutOfMemory)
	var oe *mr.OutOfMemoryError
	if _, err := p.Allocate(10); !errors.As(err, &oe) || oe.Resource != "pinned" {
		t.Errorf("injected OOM: %v", err)
	}
}

// TestPinnedStaging stages a copy through pinned memory and frees the
// buffer after the copy with FreeAfter, which must wait for it.
func TestPinnedStaging(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	s := resStream(t, dev)
	p := mr.NewPinned(dev)
	d := mr.NewDirect(dev)
	const n = 1 << 16
	dst, err := d.Allocate(n, s)
	if err != nil {
		t.Fatal(err)
	}
	host, err := p.Allocate(n)
	if err != nil {
		t.Fatal(err)
	}
	release := dev.Hold(s)
	if err := dev.MemsetD8Async(dst, 0x5A, n, s); err != nil {
		t.Fatal(err)
	}
	if err := dev.CopyDtoHAsync(host, dst, s); err != nil {
		t.Fatal(err)
	}
	var released atomic.Bool
	go func() {
		time.Sleep(20 * time.Millisecond)
		released.Store(true)
		release()
	}()
	// A pageable copy of what the copy into host brought, read after
	// FreeAfter has synchronized s.
	got := make([]byte, n)
	if err := dev.CopyDtoHAsync(got, dst, s); err != nil {
		t.Fatal(err)
	}
	if err := p.FreeAfter(host, s); err != nil {
		t.Fatal(err)
	}
	if !released.Load() {
		t.Fatal("FreeAfter returned while the stream's copy was held")
	}
	if !bytes.Equal(got, bytes.Repeat([]byte{0x5A}, n)) {
		t.Error("staged copy lost")
	}
	if err := p.FreeAfter(host, nil); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("FreeAfter with a nil stream: %v", err)
	}
	if err := d.Deallocate(dst, n, s); err != nil {
		t.Fatal(err)
	}
}

func ExamplePinned() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()

	pinned := mr.NewPinned(dev)
	staging, err := pinned.Allocate(4096) // page-locked host memory
	if err != nil {
		panic(err)
	}
	copy(staging, "hello")
	d := mr.NewDirect(dev)
	p, _ := d.Allocate(4096, s)
	dev.CopyHtoDAsync(p, staging, s)
	// The copy may still read staging: free it once s has passed it.
	pinned.FreeAfter(staging, s)
	out := make([]byte, 5)
	dev.CopyDtoHAsync(out, p, s)
	s.Synchronize()
	d.Deallocate(p, 4096, s)
	fmt.Println(string(out))
	// Output: hello
}
