package devarena

import (
	"cmp"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// tagResult is what one Tag launch did, as read back from the device.
type tagResult struct {
	served, failed int
	bytes          int // sum of the served requests, rounded up to the alignment
	stats          Stats
}

// runTag enqueues Tag(n, span) on a's stream and checks everything the
// host can see afterwards: every served allocation is inside the region,
// aligned, disjoint from the others, and holds its owner's id in exactly
// the requested bytes (its rounding padding and every byte of the region
// no one was given are still poison); the high-water mark is the sum of
// the rounded requests; nothing outside the region was written. The region
// must be all poison before the call.
func runTag(t *testing.T, k *Kernels, g *guarded, a *Arena, n, span int) tagResult {
	t.Helper()
	dev, s := a.Device(), a.Stream()
	out, err := dev.MallocAsync(8*max(n, 1), s)
	if err != nil {
		t.Fatalf("output buffer: %v", err)
	}
	defer func() {
		if err := dev.FreeAsync(out, s); err != nil {
			t.Errorf("free output buffer: %v", err)
		}
	}()
	if err := dev.MemsetD8Async(out, 0xEE, 8*max(n, 1), s); err != nil {
		t.Fatal(err)
	}
	if err := k.Tag(s, a, out, n, span); err != nil {
		t.Fatalf("tag: %v", err)
	}
	st, err := a.Stats()
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	ptrs := readBack(t, dev, s, out, 8*n)
	region := readBack(t, dev, s, a.Base(), a.Size())

	type alloc struct {
		i      int
		lo, hi int // offsets in the region: [lo, lo+req) tagged, [lo+req, hi) padding
		req    int
	}
	var allocs []alloc
	r := tagResult{stats: st}
	align := a.Align()
	for i := range n {
		p := gpu.DevicePtr(binary.LittleEndian.Uint64(ptrs[8*i:]))
		if p == 0 {
			r.failed++
			continue
		}
		req := TagBytes(uint64(i), span)
		rounded := (req + align - 1) / align * align
		lo := int(p - a.Base())
		if p < a.Base() || lo+rounded > a.Size() {
			t.Fatalf("thread %d got %#x (+%d bytes), outside region [%#x, +%d)", i, p, rounded, a.Base(), a.Size())
		}
		if int(p)%align != 0 {
			t.Fatalf("thread %d got %#x, not %d-aligned", i, p, align)
		}
		allocs = append(allocs, alloc{i: i, lo: lo, hi: lo + rounded, req: req})
		r.served++
		r.bytes += rounded
	}
	slices.SortFunc(allocs, func(x, y alloc) int { return cmp.Compare(x.lo, y.lo) })
	next := 0 // first byte of the region not yet accounted for
	for j, al := range allocs {
		if j > 0 && al.lo < allocs[j-1].hi {
			t.Fatalf("threads %d [%d, %d) and %d [%d, %d) overlap",
				allocs[j-1].i, allocs[j-1].lo, allocs[j-1].hi, al.i, al.lo, al.hi)
		}
		if k := notPoison(region[next:al.lo]); k >= 0 {
			t.Fatalf("region byte %d, in no allocation, written: %#x", next+k, region[next+k])
		}
		for w := al.lo; w < al.lo+al.req; w += 4 {
			if got := binary.LittleEndian.Uint32(region[w:]); got != uint32(al.i) {
				t.Fatalf("thread %d's word at region offset %d holds %d", al.i, w, got)
			}
		}
		if k := notPoison(region[al.lo+al.req : al.hi]); k >= 0 {
			t.Fatalf("thread %d's padding byte %d written", al.i, al.lo+al.req+k)
		}
		next = al.hi
	}
	if k := notPoison(region[next:]); k >= 0 {
		t.Fatalf("region byte %d, past every allocation, written: %#x", next+k, region[next+k])
	}
	if r.bytes > a.Size() {
		t.Fatalf("served %d bytes from a %d-byte region", r.bytes, a.Size())
	}
	switch {
	case r.failed == 0 && st.Overflow:
		t.Errorf("no request failed, but the overflow flag is set")
	case r.failed > 0 && !st.Overflow:
		t.Errorf("%d requests failed, but the overflow flag is clear", r.failed)
	case !st.Overflow && st.HighWater != r.bytes:
		t.Errorf("high water %d, want the sum of the rounded requests %d", st.HighWater, r.bytes)
	case st.Overflow && (st.HighWater < r.bytes || st.HighWater > a.Size()):
		t.Errorf("overflowed with high water %d, want between the served %d and the size %d", st.HighWater, r.bytes, a.Size())
	}
	g.checkOutside(t, a)
	return r
}

// tagDemand is the bytes Tag(n, span) asks for, rounded to align.
func tagDemand(n, span, align int) int {
	sum := 0
	for i := range n {
		req := TagBytes(uint64(i), span)
		sum += (req + align - 1) / align * align
	}
	return sum
}

// repoison fills a's region with poison again, in order on its stream.
func repoison(t *testing.T, a *Arena) {
	t.Helper()
	if err := a.Device().MemsetD8Async(a.Base(), poison, a.Size(), a.Stream()); err != nil {
		t.Fatalf("poison region: %v", err)
	}
}
