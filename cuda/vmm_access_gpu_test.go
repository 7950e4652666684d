// What the device pays to reach memory by how it was mapped: one range of
// 1 GiB backed by 512 physical allocations of one granule each (what
// growth in place maps for small commits), by one physical allocation,
// or by cuMemAlloc. The benchmark copies the range's first half onto its
// second half on the device and reports the device's time per copy from
// events, so the host's cost of the call is not in the figure; GB/s is the
// bytes read and written (the range's size) per second of that time.

package cuda_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/internal/testdev"
)

func BenchmarkVMMAccess(b *testing.B) {
	dev, ctx := needGPU(b)
	s := newStream(b, ctx)
	g := vmmGranule(b, dev, ctx)
	const size = 1 << 30
	k := uint64(size) / g
	for _, shape := range []string{"granules", "handle", "memalloc"} {
		b.Run(fmt.Sprintf("shape=%s", shape), func(b *testing.B) {
			base, free := vmmAccessRange(b, ctx, dev, shape, g, k)
			defer free()
			start := testdev.Must(ctx.EventCreate(cuda.EventDefault))(b)
			end := testdev.Must(ctx.EventCreate(cuda.EventDefault))(b)
			defer ctx.EventDestroy(start)
			defer ctx.EventDestroy(end)
			if err := ctx.MemsetD8Async(base, 0x5A, size, s); err != nil {
				b.Fatal(err)
			}
			var gpu time.Duration
			n := 0
			for b.Loop() {
				if err := ctx.EventRecord(start, s); err != nil {
					b.Fatal(err)
				}
				if err := ctx.MemcpyDtoDAsync(base+size/2, base, size/2, s); err != nil {
					b.Fatal(err)
				}
				if err := ctx.EventRecord(end, s); err != nil {
					b.Fatal(err)
				}
				if err := ctx.EventSynchronize(end); err != nil {
					b.Fatal(err)
				}
				d, err := ctx.EventElapsed(start, end)
				if err != nil {
					b.Fatal(err)
				}
				gpu += d
				n++
			}
			per := gpu / time.Duration(n)
			b.ReportMetric(float64(per.Microseconds()), "gpu-us/copy")
			b.ReportMetric(float64(size)/per.Seconds()/1e9, "GB/s")
		})
	}
}

// vmmAccessRange maps size k*g bytes in the given shape and returns its
// address and the function that gives it back.
func vmmAccessRange(b *testing.B, ctx cuda.Context, dev cuda.Device, shape string, g, k uint64) (cuda.DevicePtr, func()) {
	b.Helper()
	n := k * g
	if shape == "memalloc" {
		p := testdev.Must(ctx.MemAlloc(n))(b)
		return p, func() {
			if err := ctx.MemFree(p); err != nil {
				b.Error(err)
			}
		}
	}
	base := testdev.Must(ctx.MemAddressReserve(n, 0))(b)
	var hs []cuda.MemHandle
	var sizes []uint64
	if shape == "handle" {
		hs = append(hs, testdev.Must(ctx.MemCreate(dev, n))(b))
		sizes = append(sizes, n)
	} else {
		for range k {
			hs = append(hs, testdev.Must(ctx.MemCreate(dev, g))(b))
			sizes = append(sizes, g)
		}
	}
	off := uint64(0)
	for i, h := range hs {
		if err := ctx.MemMap(base+cuda.DevicePtr(off), sizes[i], 0, h); err != nil {
			b.Fatal(err)
		}
		off += sizes[i]
	}
	if err := ctx.MemSetAccess(base, n, dev); err != nil {
		b.Fatal(err)
	}
	return base, func() {
		if err := ctx.MemUnmap(base, n); err != nil {
			b.Error(err)
		}
		for _, h := range hs {
			if err := ctx.MemRelease(h); err != nil {
				b.Error(err)
			}
		}
		if err := ctx.MemAddressFree(base, n); err != nil {
			b.Error(err)
		}
	}
}
