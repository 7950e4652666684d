// The virtual-memory wing on the GPU: what the driver accepts of a range
// that spans several mappings, and what each call costs per granule when
// a range of k granules is mapped granule by granule or in one piece.

package cuda_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/cuda"
	"github.com/streamalloc/streamalloc/internal/testdev"
)

// vmmGranule returns the device's minimum granularity.
func vmmGranule(tb testing.TB, dev cuda.Device, ctx cuda.Context) uint64 {
	tb.Helper()
	return testdev.Must(ctx.MemAllocationGranularity(dev, cuda.GranularityMinimum))(tb)
}

// TestVMMSpanningMappings pins the driver's rules that growth in place
// (mr.Virtual) builds on: one cuMemSetAccess may cover several adjacent
// mappings of different physical allocations, one cuMemUnmap may unmap
// several whole adjacent mappings, an unmap that cuts a mapping is
// refused, and part of an allocation cannot be mapped.
func TestVMMSpanningMappings(t *testing.T) {
	dev, ctx := needGPU(t)
	s := newStream(t, ctx)
	g := vmmGranule(t, dev, ctx)
	const k = 4
	base := testdev.Must(ctx.MemAddressReserve(2*k*g, 0))(t)
	defer func() {
		if err := ctx.MemAddressFree(base, 2*k*g); err != nil {
			t.Error(err)
		}
	}()
	// k allocations of one granule each, k mappings, one SetAccess.
	hs := make([]cuda.MemHandle, k)
	for i := range hs {
		hs[i] = testdev.Must(ctx.MemCreate(dev, g))(t)
		if err := ctx.MemMap(base+cuda.DevicePtr(uint64(i)*g), g, 0, hs[i]); err != nil {
			t.Fatalf("map granule %d: %v", i, err)
		}
	}
	if err := ctx.MemSetAccess(base, k*g, dev); err != nil {
		t.Fatalf("one SetAccess over %d mappings: %v", k, err)
	}
	if err := ctx.MemsetD8Async(base, 0x5A, k*g, s); err != nil {
		t.Fatal(err)
	}
	var last [1]byte
	if err := ctx.MemcpyDtoHAsync(last[:], base+cuda.DevicePtr(k*g-1), s); err != nil {
		t.Fatal(err)
	}
	if err := ctx.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	if last[0] != 0x5A {
		t.Fatalf("last byte %#x after a set over %d mappings, want 0x5a", last[0], k)
	}
	// Released while mapped: the memory goes with the one unmap.
	for i := range hs {
		if err := ctx.MemRelease(hs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := ctx.MemUnmap(base, k*g); err != nil {
		t.Fatalf("one Unmap over %d whole mappings: %v", k, err)
	}
	// One allocation of two granules mapped whole: unmapping half of it
	// is refused.
	h2 := testdev.Must(ctx.MemCreate(dev, 2*g))(t)
	if err := ctx.MemMap(base, 2*g, 0, h2); err != nil {
		t.Fatal(err)
	}
	if err := ctx.MemUnmap(base, g); err == nil {
		t.Errorf("Unmap of half a mapping succeeded; the driver was expected to refuse it")
	} else {
		var ce *cuda.Error
		if !errors.As(err, &ce) {
			t.Errorf("Unmap of half a mapping: %v, not a driver error", err)
		}
		t.Logf("Unmap of half a mapping: %v", err)
	}
	if err := ctx.MemUnmap(base, 2*g); err != nil {
		t.Fatal(err)
	}
	// Part of an allocation (an offset other than 0) cannot be mapped:
	// driver 580 answers CUDA_ERROR_NOT_SUPPORTED, as the driver's
	// documentation says (the offset must currently be zero). So an
	// allocation is mapped whole, and unmapped whole.
	if err := ctx.MemMap(base+cuda.DevicePtr(g), g, g, h2); !errors.Is(err, cuda.ErrNotSupported) {
		t.Errorf("map the second granule of an allocation: %v, want ErrNotSupported", err)
	}
	if err := ctx.MemRelease(h2); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkVMMCalls times, per granule, the driver calls that commit k
// granules of a reserved range and decommit them again, in four shapes:
//
//	granules            per granule: cuMemCreate(g), cuMemMap, cuMemSetAccess;
//	                    then per granule cuMemUnmap, cuMemRelease (mr.Virtual
//	                    before batching)
//	granules-access1    per granule create and map, one SetAccess over the
//	                    k mappings; per granule unmap and release
//	granules-unmap1     as granules-access1, but one Unmap over the k
//	                    mappings
//	handle              one cuMemCreate(k·g), one map, one SetAccess, one
//	                    unmap, one release
//
// Each iteration sets the range's bytes between commit and decommit (off
// the clock, with a stream synchronization) so that the unmap meets pages
// the device has touched. The metrics are ns per granule of each call
// kind, and of the commit and decommit in all.
func BenchmarkVMMCalls(b *testing.B) {
	dev, ctx := needGPU(b)
	s := newStream(b, ctx)
	g := vmmGranule(b, dev, ctx)
	for _, k := range []uint64{1, 16, 512} {
		for _, shape := range []string{"granules", "granules-access1", "granules-unmap1", "handle"} {
			b.Run(fmt.Sprintf("k=%d/%s", k, shape), func(b *testing.B) {
				base := testdev.Must(ctx.MemAddressReserve(k*g, 0))(b)
				defer ctx.MemAddressFree(base, k*g)
				at := func(i uint64) cuda.DevicePtr { return base + cuda.DevicePtr(i*g) }
				var create, mapT, access, unmap, release time.Duration
				hs := make([]cuda.MemHandle, k)
				must := func(err error) {
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				for range b.N {
					switch shape {
					case "granules":
						for i := range k {
							t := time.Now()
							h, err := ctx.MemCreate(dev, g)
							must(err)
							hs[i] = h
							t1 := time.Now()
							must(ctx.MemMap(at(i), g, 0, h))
							t2 := time.Now()
							must(ctx.MemSetAccess(at(i), g, dev))
							t3 := time.Now()
							create += t1.Sub(t)
							mapT += t2.Sub(t1)
							access += t3.Sub(t2)
						}
					case "granules-access1", "granules-unmap1":
						for i := range k {
							t := time.Now()
							h, err := ctx.MemCreate(dev, g)
							must(err)
							hs[i] = h
							t1 := time.Now()
							must(ctx.MemMap(at(i), g, 0, h))
							create += t1.Sub(t)
							mapT += time.Since(t1)
						}
						t := time.Now()
						must(ctx.MemSetAccess(base, k*g, dev))
						access += time.Since(t)
					case "handle":
						t := time.Now()
						h, err := ctx.MemCreate(dev, k*g)
						must(err)
						hs[0] = h
						t1 := time.Now()
						must(ctx.MemMap(base, k*g, 0, h))
						t2 := time.Now()
						must(ctx.MemSetAccess(base, k*g, dev))
						create += t1.Sub(t)
						mapT += t2.Sub(t1)
						access += time.Since(t2)
					}
					b.StopTimer()
					must(ctx.MemsetD8Async(base, 0x3C, k*g, s))
					must(ctx.StreamSynchronize(s))
					b.StartTimer()
					switch shape {
					case "granules", "granules-access1":
						for i := range k {
							t := time.Now()
							must(ctx.MemUnmap(at(i), g))
							t1 := time.Now()
							must(ctx.MemRelease(hs[i]))
							unmap += t1.Sub(t)
							release += time.Since(t1)
						}
					case "granules-unmap1":
						t := time.Now()
						must(ctx.MemUnmap(base, k*g))
						t1 := time.Now()
						for i := range k {
							must(ctx.MemRelease(hs[i]))
						}
						unmap += t1.Sub(t)
						release += time.Since(t1)
					case "handle":
						t := time.Now()
						must(ctx.MemUnmap(base, k*g))
						t1 := time.Now()
						must(ctx.MemRelease(hs[0]))
						unmap += t1.Sub(t)
						release += time.Since(t1)
					}
				}
				per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(uint64(b.N)*k) }
				b.ReportMetric(per(create), "create-ns/gran")
				b.ReportMetric(per(mapT), "map-ns/gran")
				b.ReportMetric(per(access), "access-ns/gran")
				b.ReportMetric(per(unmap), "unmap-ns/gran")
				b.ReportMetric(per(release), "release-ns/gran")
				b.ReportMetric(per(create+mapT+access), "commit-ns/gran")
				b.ReportMetric(per(unmap+release), "decommit-ns/gran")
			})
		}
	}
}

// BenchmarkVMMCallsBusy asks whether the calls wait for the device: a
// kernel spinning for 20 ms runs on another stream while k granules are
// committed (create, map, one SetAccess) and, after a second spin, unmapped
// and released, one allocation a granule or one for all. The metrics are
// the wall time of the commit and of the decommit per operation; a call
// that waited for the device takes about the spin's 20 ms.
func BenchmarkVMMCallsBusy(b *testing.B) {
	dev, ctx := needGPU(b)
	s := newStream(b, ctx)
	k8 := loadKernels(b, ctx)
	g := vmmGranule(b, dev, ctx)
	const spin = 20 * time.Millisecond
	for _, k := range []uint64{1, 16} {
		for _, shape := range []string{"granules", "handle"} {
			b.Run(fmt.Sprintf("k=%d/%s", k, shape), func(b *testing.B) {
				base := testdev.Must(ctx.MemAddressReserve(k*g, 0))(b)
				defer ctx.MemAddressFree(base, k*g)
				must := func(err error) {
					if err != nil {
						b.Fatal(err)
					}
				}
				var commit, decommit time.Duration
				hs := make([]cuda.MemHandle, k)
				for range b.N {
					k8.spin(b, s, spin)
					t := time.Now()
					if shape == "handle" {
						h, err := ctx.MemCreate(dev, k*g)
						must(err)
						hs[0] = h
						must(ctx.MemMap(base, k*g, 0, h))
					} else {
						for i := range k {
							h, err := ctx.MemCreate(dev, g)
							must(err)
							hs[i] = h
							must(ctx.MemMap(base+cuda.DevicePtr(i*g), g, 0, h))
						}
					}
					must(ctx.MemSetAccess(base, k*g, dev))
					commit += time.Since(t)
					must(ctx.StreamSynchronize(s))
					k8.spin(b, s, spin)
					t = time.Now()
					if shape == "handle" {
						must(ctx.MemUnmap(base, k*g))
						must(ctx.MemRelease(hs[0]))
					} else {
						for i := range k {
							must(ctx.MemUnmap(base+cuda.DevicePtr(i*g), g))
							must(ctx.MemRelease(hs[i]))
						}
					}
					decommit += time.Since(t)
					must(ctx.StreamSynchronize(s))
				}
				b.ReportMetric(float64(commit.Nanoseconds())/float64(b.N), "commit-ns/op")
				b.ReportMetric(float64(decommit.Nanoseconds())/float64(b.N), "decommit-ns/op")
			})
		}
	}
}

// TestVMMGranularityExportable: the granularity asked with the handle
// types an exportable allocation is made with. With none it is
// MemAllocationGranularity's; with POSIX descriptors (which every Linux
// device offers) it is a granule the driver then makes with those
// properties.
func TestVMMGranularityExportable(t *testing.T) {
	dev, ctx := needGPU(t)
	g := vmmGranule(t, dev, ctx)
	if got := testdev.Must(ctx.MemAllocationGranularityExportable(dev, cuda.GranularityMinimum, cuda.HandleNone))(t); got != g {
		t.Errorf("granularity with no handle types: %d, want MemAllocationGranularity's %d", got, g)
	}
	gp := testdev.Must(ctx.MemAllocationGranularityExportable(dev, cuda.GranularityMinimum, cuda.HandlePOSIX))(t)
	if gp == 0 || gp&(gp-1) != 0 {
		t.Fatalf("granularity of POSIX-exportable memory: %d, want a power of two", gp)
	}
	h := testdev.Must(ctx.MemCreateExportable(dev, gp, cuda.HandlePOSIX))(t)
	if err := ctx.MemRelease(h); err != nil {
		t.Error(err)
	}
	t.Logf("granularity: %d; POSIX-exportable: %d", g, gp)
}
