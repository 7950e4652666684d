package mr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

func TestFixedSizeOptions(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	up := mr.NewDirect(dev)
	for _, c := range []struct {
		opts      mr.FixedSizeOptions
		blockSize int
		err       error
	}{
		{mr.FixedSizeOptions{}, 1 << 20, nil},
		{mr.FixedSizeOptions{BlockSize: 1000}, 1024, nil},
		{mr.FixedSizeOptions{BlockSize: 1, BlocksPerChunk: 1}, 256, nil},
		{mr.FixedSizeOptions{BlockSize: -1}, 0, mr.ErrInvalidSize},
		{mr.FixedSizeOptions{BlocksPerChunk: -1}, 0, mr.ErrInvalidSize},
		{mr.FixedSizeOptions{BlockSize: 1 << 40, BlocksPerChunk: 1 << 30}, 0, mr.ErrInvalidSize},
	} {
		r, err := mr.NewFixedSize(up, c.opts)
		if !errors.Is(err, c.err) {
			t.Errorf("%+v: err = %v, want %v", c.opts, err, c.err)
			continue
		}
		if err == nil && r.BlockSize() != c.blockSize {
			t.Errorf("%+v: block size %d, want %d", c.opts, r.BlockSize(), c.blockSize)
		}
	}
	if _, err := mr.NewFixedSize(nil, mr.FixedSizeOptions{}); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("nil upstream: %v", err)
	}
}

// TestFixedSizeStreamOrder checks the pool rules: a block freed on s is
// reused on s at once, without growth; a stream with an empty list steals
// from another after waiting on it; the resource grows only when no list
// has a block.
func TestFixedSizeStreamOrder(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	s1, s2 := resStream(t, dev), resStream(t, dev)
	const bs, per = 4096, 4
	r, err := mr.NewFixedSize(mr.NewDirect(dev), mr.FixedSizeOptions{BlockSize: bs, BlocksPerChunk: per})
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Allocate(100, s1)
	if err != nil {
		t.Fatal(err)
	}
	if u := r.Usage(); u.Reserved != bs*per || u.Used != 100 {
		t.Fatalf("one block: usage %+v", u)
	}
	if err := r.Deallocate(p, 100, s1); err != nil {
		t.Fatal(err)
	}
	q, err := r.Allocate(bs, s1)
	if err != nil {
		t.Fatal(err)
	}
	if q != p {
		t.Errorf("same-stream reuse: got %#x, want the block just freed %#x", q, p)
	}
	// Take the chunk's other blocks on s1, write them, free them all on s1.
	blocks := []gpu.DevicePtr{q}
	for range per - 1 {
		b, err := r.Allocate(bs, s1)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, b)
	}
	release := dev.Hold(s1)
	for _, b := range blocks {
		if err := dev.MemsetD8Async(b, 1, bs, s1); err != nil {
			t.Fatal(err)
		}
		if err := r.Deallocate(b, bs, s1); err != nil {
			t.Fatal(err)
		}
	}
	write := dev.LastOp(s1)
	// s2 has no blocks: it must steal s1's, ordered after s1's writes.
	b, err := r.Allocate(10, s2)
	if err != nil {
		t.Fatal(err)
	}
	if u := r.Usage(); u.Reserved != bs*per {
		t.Errorf("steal grew the resource: %+v", u)
	}
	if err := dev.MemsetD8Async(b, 2, 10, s2); err != nil {
		t.Fatal(err)
	}
	if !dev.HappensBefore(write, dev.LastOp(s2)) {
		t.Error("stolen block used on s2 without ordering after s1")
	}
	release()
	if err := r.Deallocate(b, 10, s2); err != nil {
		t.Fatal(err)
	}
	resReleaseAll(t, dev, r, s1, s2)
}

// TestFixedSizeReleaseKeepsLiveChunks checks that Release frees only
// chunks with no live block.
func TestFixedSizeReleaseKeepsLiveChunks(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	s := resStream(t, dev)
	r, err := mr.NewFixedSize(mr.NewDirect(dev), mr.FixedSizeOptions{BlockSize: 1024, BlocksPerChunk: 2})
	if err != nil {
		t.Fatal(err)
	}
	var ps []gpu.DevicePtr
	for range 6 { // three chunks
		p, err := r.Allocate(1024, s)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	for _, p := range ps[1:] {
		if err := r.Deallocate(p, 1024, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Release(); err != nil {
		t.Fatal(err)
	}
	if u := r.Usage(); u.Reserved != 2048 || u.Used != 1024 {
		t.Errorf("after release with one live block: %+v, want one chunk", u)
	}
	if err := r.Close(); err == nil {
		t.Error("Close with a live block succeeded")
	}
	if err := r.Deallocate(ps[0], 1024, s); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if u := r.Usage(); u.Reserved != 0 {
		t.Errorf("after Close: %+v", u)
	}
}

// TestFixedSizeUpstreamFailure checks a failed growth leaves nothing
// behind and a failed steal puts the blocks back.
func TestFixedSizeUpstreamFailure(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	s1, s2 := resStream(t, dev), resStream(t, dev)
	r, err := mr.NewFixedSize(mr.NewDirect(dev), mr.FixedSizeOptions{BlockSize: 1024, BlocksPerChunk: 2})
	if err != nil {
		t.Fatal(err)
	}
	dev.FailNext(sim.OpMalloc, 1, gpu.ErrOutOfMemory)
	var oe *mr.OutOfMemoryError
	if _, err := r.Allocate(1, s1); !errors.As(err, &oe) || oe.Resource != "fixedsize" {
		t.Fatalf("upstream OOM: %v", err)
	}
	if u := r.Usage(); u != (mr.Usage{}) {
		t.Errorf("failed growth left %+v", u)
	}
	p, err := r.Allocate(1, s1)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Deallocate(p, 1, s1); err != nil {
		t.Fatal(err)
	}
	dev.FailNext(sim.OpEventRecord, 1, gpu.ErrLaunchFailed)
	if _, err := r.Allocate(1, s2); !errors.Is(err, gpu.ErrLaunchFailed) {
		t.Fatalf("steal with a failing record: %v", err)
	}
	// The blocks went back: s1 still has both.
	for range 2 {
		if _, err := r.Allocate(1, s1); err != nil {
			t.Fatal(err)
		}
	}
	if u := r.Usage(); u.Reserved != 2048 {
		t.Errorf("usage %+v, want one chunk", u)
	}
}

func ExampleFixedSize() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()

	r, err := mr.NewFixedSize(mr.NewDirect(dev), mr.FixedSizeOptions{BlockSize: 4096, BlocksPerChunk: 64})
	if err != nil {
		panic(err)
	}
	p, _ := r.Allocate(1000, s) // a whole 4 KiB block
	r.Deallocate(p, 1000, s)
	q, _ := r.Allocate(4096, s) // the same block again, at once
	fmt.Println(p == q, r.Usage().Reserved)
	r.Deallocate(q, 4096, s)
	r.Release()
	// Output: true 262144
}

// TestFixedSizeReleaseFailure makes the upstream free fail during Release:
// the chunk stays, usable, and a later Release frees it.
func TestFixedSizeReleaseFailure(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	s := resStream(t, dev)
	r, err := mr.NewFixedSize(mr.NewDirect(dev), mr.FixedSizeOptions{BlockSize: 1024, BlocksPerChunk: 2})
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Allocate(1024, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Deallocate(p, 1024, s); err != nil {
		t.Fatal(err)
	}
	dev.FailNext(sim.OpFree, 1, gpu.ErrLaunchFailed)
	if err := r.Release(); !errors.Is(err, gpu.ErrLaunchFailed) {
		t.Fatalf("Release with a failing upstream free: %v", err)
	}
	if u := r.Usage(); u.Reserved != 2048 {
		t.Fatalf("after the failed release: %+v, want the chunk kept", u)
	}
	var qs []gpu.DevicePtr
	for range 2 {
		q, err := r.Allocate(1, s)
		if err != nil {
			t.Fatal(err)
		}
		qs = append(qs, q)
	}
	if u := r.Usage(); u.Reserved != 2048 {
		t.Errorf("kept chunk not reused: %+v", u)
	}
	for _, q := range qs {
		if err := r.Deallocate(q, 1, s); err != nil {
			t.Fatal(err)
		}
	}
	resReleaseAll(t, dev, r, s)
}
