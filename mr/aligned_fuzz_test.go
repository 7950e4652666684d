package mr_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// FuzzAlignedOverPool runs operation sequences, good and bad, through an
// Aligned adaptor over a Pool (its slots, and its table for other
// alignments) and checks each result against a reference model: the live
// allocations with their sizes, and the addresses freed and not handed
// out again. A free of a live address with its size succeeds, with
// another size is a size mismatch; a free of an address freed before is
// a double free or, once the adaptor forgot it, an unknown pointer;
// an address never handed out is unknown. Every refused free changes
// nothing: the adaptor's count and the pool's usage stay, and at the end
// every live allocation frees and the pool holds nothing.
func FuzzAlignedOverPool(f *testing.F) {
	f.Add([]byte{0, 8, 16, 4, 5, 6, 7, 3, 11, 12, 4, 4})
	f.Add([]byte{0, 0, 0, 0, 5, 5, 4, 4, 6, 6, 4, 4, 6})
	f.Add([]byte{3, 11, 19, 27, 35, 43, 4, 12, 20, 5, 6, 7})
	f.Fuzz(func(t *testing.T, ops []byte) {
		pool, s := newOwnedPool(t)
		a, err := mr.NewAligned(pool, 4096)
		if err != nil {
			t.Fatal(err)
		}
		type al struct {
			p    gpu.DevicePtr
			size int
		}
		var live []al
		var freed []gpu.DevicePtr // freed by a, not handed out again
		find := func(p gpu.DevicePtr) int { return slices.IndexFunc(live, func(x al) bool { return x.p == p }) }
		handed := func(p gpu.DevicePtr, size int) {
			if find(p) >= 0 {
				t.Fatalf("%#x handed out twice", p)
			}
			live = append(live, al{p, size})
			freed = slices.DeleteFunc(freed, func(q gpu.DevicePtr) bool { return q == p })
		}
		unchanged := func(i int, what string, err error, want ...error) {
			t.Helper()
			if !slices.ContainsFunc(want, func(w error) bool { return errors.Is(err, w) }) {
				t.Fatalf("op %d: %s: %v, want one of %v", i, what, err, want)
			}
			if got, want := a.String(), fmt.Sprintf("aligned to 4.0 KiB: %d allocation%s live", len(live), plural(len(live))); got != want {
				t.Fatalf("op %d: %s changed the adaptor: %s, want %s", i, what, got, want)
			}
		}
		for i, op := range ops {
			arg := int(op >> 3)
			switch op & 7 {
			case 0, 1, 2: // at the adaptor's alignment
				size := (arg + 1) * 97
				p, err := a.Allocate(size, s)
				if err != nil || p == 0 || p%4096 != 0 {
					t.Fatalf("op %d: Allocate(%d) = %#x, %v", i, size, p, err)
				}
				handed(p, size)
			case 3: // at another alignment: the table
				size, align := (arg+1)*61, 1<<(8+arg%7)
				p, err := a.AllocateAligned(size, align, s)
				if err != nil || p == 0 || int(p)%align != 0 {
					t.Fatalf("op %d: AllocateAligned(%d, %d) = %#x, %v", i, size, align, p, err)
				}
				handed(p, size)
			case 4: // a right free
				if len(live) == 0 {
					continue
				}
				j := arg % len(live)
				x := live[j]
				if err := a.Deallocate(x.p, x.size, s); err != nil {
					t.Fatalf("op %d: Deallocate(%#x, %d): %v", i, x.p, x.size, err)
				}
				live = slices.Delete(live, j, j+1)
				freed = append(freed, x.p)
			case 5: // a wrong size
				if len(live) == 0 {
					continue
				}
				x := live[arg%len(live)]
				err := a.Deallocate(x.p, x.size+1+arg, s)
				unchanged(i, "wrong size", err, mr.ErrSizeMismatch)
			case 6: // a double free
				if len(freed) == 0 {
					continue
				}
				p := freed[arg%len(freed)]
				err := a.Deallocate(p, 97, s)
				unchanged(i, "double free", err, mr.ErrDoubleFree, mr.ErrUnknownPointer)
			case 7: // never handed out: beyond the pool's memory, or inside a live allocation
				p := gpu.DevicePtr(1 << 50)
				if len(live) > 0 {
					x := live[arg%len(live)]
					if x.size > 300 {
						p = x.p + 256
					}
				}
				if find(p) >= 0 || slices.Contains(freed, p) {
					continue
				}
				err := a.Deallocate(p, 97, s)
				unchanged(i, "unknown pointer", err, mr.ErrUnknownPointer)
			}
		}
		for _, x := range live {
			if err := a.Deallocate(x.p, x.size, s); err != nil {
				t.Fatalf("final free of %#x (%d bytes): %v", x.p, x.size, err)
			}
		}
		if u := pool.Usage(); u.Used != 0 {
			t.Fatalf("pool used %d after every free", u.Used)
		}
		if got := a.String(); got != "aligned to 4.0 KiB: 0 allocations live" {
			t.Fatalf("%s after every free", got)
		}
	})
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
