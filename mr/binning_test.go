package mr_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

func TestBinningBins(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	up := mr.NewDirect(dev)
	custom, err := mr.NewFixedSize(up, mr.FixedSizeOptions{BlockSize: 3000, BlocksPerChunk: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts mr.BinningOptions
		want []int
		err  error
	}{
		{"default", mr.BinningOptions{}, []int{256, 512, 1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10,
			64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20}, nil},
		{"rounded", mr.BinningOptions{MinSize: 1, MaxSize: 3000}, []int{256, 512, 1024, 2048}, nil},
		{"custom", mr.BinningOptions{MinSize: 1024, MaxSize: 4096, Bins: []mr.Bin{{Size: 3000, Resource: custom}}},
			[]int{1024, 2048, 3072, 4096}, nil},
		{"none", mr.BinningOptions{MinSize: 4096, MaxSize: 1024}, []int{}, nil},
		{"negative", mr.BinningOptions{MinSize: -1}, nil, mr.ErrInvalidSize},
		{"nil bin", mr.BinningOptions{Bins: []mr.Bin{{Size: 100}}}, nil, mr.ErrInvalidSize},
	} {
		r, err := mr.NewBinning(up, c.opts)
		if !errors.Is(err, c.err) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.err)
			continue
		}
		if err == nil && !slices.Equal(r.BinSizes(), c.want) {
			t.Errorf("%s: bins %v, want %v", c.name, r.BinSizes(), c.want)
		}
	}
	other, _ := sim.New(sim.Config{}).Device(0)
	if _, err := mr.NewBinning(up, mr.BinningOptions{Bins: []mr.Bin{{Size: 100, Resource: mr.NewDirect(other)}}}); !errors.Is(err, gpu.ErrWrongDevice) {
		t.Errorf("bin of another device: %v", err)
	}
}

// TestBinningRouting checks requests reach the right bin or the upstream,
// and that frees with another size are diagnosed wherever they land.
func TestBinningRouting(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	s := resStream(t, dev)
	up := mr.NewDirect(dev)
	custom, err := mr.NewFixedSize(up, mr.FixedSizeOptions{BlockSize: 3072, BlocksPerChunk: 2})
	if err != nil {
		t.Fatal(err)
	}
	r, err := mr.NewBinning(up, mr.BinningOptions{MinSize: 1024, MaxSize: 4096, BlocksPerChunk: 4,
		Bins: []mr.Bin{{Size: 3072, Resource: custom}}})
	if err != nil {
		t.Fatal(err)
	}
	small, err := r.Allocate(1000, s) // bin 1024: a chunk of 4 KiB
	if err != nil {
		t.Fatal(err)
	}
	mid, err := r.Allocate(2500, s) // the custom bin
	if err != nil {
		t.Fatal(err)
	}
	if u := custom.Usage(); u.Used != 2500 {
		t.Errorf("custom bin usage %+v, want 2500 used", u)
	}
	large, err := r.Allocate(10000, s) // upstream
	if err != nil {
		t.Fatal(err)
	}
	if u := up.Usage(); u.Used != 4096+6144+10000 {
		t.Errorf("upstream usage %+v, want chunks of 4 KiB and 6 KiB and the large allocation", u)
	}
	u := r.Usage()
	if u.Used != 1000+2500+10000 || u.Reserved != 4096+6144+10000 {
		t.Errorf("binning usage %+v", u)
	}
	for _, bad := range []struct {
		p gpu.DevicePtr
		n int
	}{{small, 2000}, {small, 10000}, {mid, 1000}, {large, 1000}, {large, 9999}} {
		if err := r.Deallocate(bad.p, bad.n, s); !errors.Is(err, mr.ErrSizeMismatch) {
			t.Errorf("free %#x as %d: %v, want ErrSizeMismatch", bad.p, bad.n, err)
		}
	}
	for _, a := range []struct {
		p gpu.DevicePtr
		n int
	}{{small, 1000}, {mid, 2500}, {large, 10000}} {
		if err := r.Deallocate(a.p, a.n, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Deallocate(large, 10000, s); !errors.Is(err, mr.ErrDoubleFree) {
		t.Errorf("double free of a large allocation: %v", err)
	}
	if err := r.Release(); err != nil {
		t.Fatal(err)
	}
	if u := r.Usage(); u.Reserved != 0 || u.Used != 0 {
		t.Errorf("after release: %+v", u)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

func ExampleBinning() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()

	// Bins of 256 B to 64 KiB over the driver's pool; larger requests go
	// to the pool directly.
	up, _ := mr.NewAsync(dev, mr.AsyncOptions{})
	r, err := mr.NewBinning(up, mr.BinningOptions{MinSize: 256, MaxSize: 64 << 10})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(r.BinSizes()))
	p, _ := r.Allocate(3000, s) // from the 4 KiB bin
	r.Deallocate(p, 3000, s)
	// Output: 9
}

// TestBinningMismatchAfterReuse frees a large allocation, lets a bin's
// chunk take the same address from the upstream, and frees the bin's block
// there with the large size: a size mismatch, not a double free (a
// regression found by FuzzResourceOps).
func TestBinningMismatchAfterReuse(t *testing.T) {
	dev := resDevice(t, sim.Config{})
	s := resStream(t, dev)
	r, err := mr.NewBinning(mr.NewDirect(dev), mr.BinningOptions{MinSize: 4096, MaxSize: 4096, BlocksPerChunk: 4})
	if err != nil {
		t.Fatal(err)
	}
	large, err := r.Allocate(16<<10, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Deallocate(large, 16<<10, s); err != nil {
		t.Fatal(err)
	}
	p, err := r.Allocate(4000, s) // a new 16 KiB chunk
	if err != nil {
		t.Fatal(err)
	}
	if p != large {
		t.Skipf("the upstream put the chunk at %#x, not at the freed %#x", p, large)
	}
	if err := r.Deallocate(p, 16<<10, s); !errors.Is(err, mr.ErrSizeMismatch) {
		t.Errorf("free of a bin's block with a large size: %v, want ErrSizeMismatch", err)
	}
	if err := r.Deallocate(p, 4000, s); err != nil {
		t.Fatal(err)
	}
}
