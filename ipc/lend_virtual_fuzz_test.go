//go:build unix

package ipc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/ipc"
	"github.com/streamalloc/streamalloc/mr"
)

// FuzzVirtualLoans runs a sequence of operations on an Exporter of
// Virtual memory and its Importer, decoded from the input, against a
// reference model of which allocations are live, lent, sent and imported:
// allocate, lend, receive, release, reap and free. Every operation's
// result is the model's (ErrLent for a free or a second lend of what is
// out, ErrReleased for a second release), the importer reads the words the
// exporter wrote before each lend, and at the end, with everything
// released and freed, nothing is mapped on either side and no descriptor
// is left open. The Virtual's memory is lent as fabric handles or, with
// fabric false, as POSIX descriptors. The Virtual maps each allocation in
// whole granules, so its 64 MiB range holds 32 of the smallest: an
// allocation it refuses as out of memory is right only once the model's
// live allocations, in granules, fill at least half the range (no
// sequence of 64 operations fragments it more than that).
func FuzzVirtualLoans(f *testing.F) {
	for _, fabric := range []bool{false, true} {
		f.Add(fabric, []byte{0, 1, 2, 3, 5})
		f.Add(fabric, []byte{0, 6, 12, 1, 7, 13, 2, 2, 2, 3, 9, 5, 4, 11, 17})
		f.Add(fabric, []byte{0, 0, 0, 1, 7, 5, 11, 2, 8, 3, 4, 1, 2, 9, 3, 5, 11, 17})
	}
	f.Fuzz(func(t *testing.T, fabric bool, ops []byte) {
		if len(ops) > 64 {
			ops = ops[:64]
		}
		ht := gpu.HandlePOSIX
		if fabric {
			ht = gpu.HandleFabric
		}
		fds := openDescriptors(t)
		exp, imp := processes(t)
		const reserve = 64 << 20
		v := newSharedVirtual(t, exp, mr.VirtualOptions{ReserveSize: reserve, HandleTypes: ht})
		e, l, im := virtualPair(t, v, nil, imp)
		ke, _ := kernels.Load(exp)
		ki, _ := kernels.Load(imp)
		se, _ := exp.NewStream()
		si, _ := imp.NewStream()
		defer se.Destroy()
		defer si.Destroy()
		g := v.GrowGranularity()
		sizes := []int{4096, g, 2*g + 4}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()

		type alloc struct {
			p    gpu.DevicePtr
			n    int
			seed uint32
			loan *ipc.Loan // out: lent and not yet back
		}
		type held struct {
			x *ipc.Import
			a *alloc
		}
		var allocs []*alloc
		var sent []*alloc // lent, not yet received, in lend order
		var imports []held
		seed := uint32(1)
		words := func(n int) int { return min(n/4, 1024) }
		granules := func(n int) int { return (n + g - 1) / g * g }
		// back waits for a's loan, given back by a release.
		back := func(a *alloc) {
			t.Helper()
			must(t, a.loan.Wait(ctx))
			a.loan = nil
		}
		for _, b := range ops {
			arg := int(b / 6)
			switch b % 6 {
			case 0: // allocate
				n := sizes[arg%len(sizes)]
				p, err := e.Allocate(n, se)
				if errors.Is(err, mr.ErrOutOfMemory) {
					held := granules(n)
					for _, a := range allocs {
						held += granules(a.n)
					}
					if held <= reserve/2 {
						t.Fatalf("allocating %d bytes with %d bytes of granules live in a %d-byte range: %v", n, held-granules(n), reserve, err)
					}
					continue
				}
				must(t, err)
				allocs = append(allocs, &alloc{p: p, n: n})
			case 1: // lend
				if len(allocs) == 0 {
					continue
				}
				a := allocs[arg%len(allocs)]
				if a.loan != nil {
					if _, err := l.Lend(ctx, a.p, a.n, se); !errors.Is(err, ipc.ErrLent) {
						t.Fatalf("lending %#x twice: %v, want ipc.ErrLent", uint64(a.p), err)
					}
					continue
				}
				seed += 1 << 20
				a.seed = seed
				must(t, ke.Fill(se, a.p, words(a.n), a.seed))
				ln, err := l.Lend(ctx, a.p, a.n, se)
				must(t, err)
				a.loan = ln
				sent = append(sent, a)
			case 2: // receive
				if len(sent) == 0 {
					continue
				}
				a := sent[0]
				sent = sent[1:]
				x, err := im.Receive(ctx, si)
				must(t, err)
				if x.Size() != a.n {
					t.Fatalf("received %d bytes, the lend was of %d", x.Size(), a.n)
				}
				if bad := mismatches(t, imp, ki, si, x.Ptr(), words(a.n), a.seed); bad != 0 {
					t.Fatalf("the importer read %d words not the exporter's", bad)
				}
				imports = append(imports, held{x, a})
			case 3: // release
				if len(imports) == 0 {
					continue
				}
				i := arg % len(imports)
				h := imports[i]
				imports = append(imports[:i], imports[i+1:]...)
				must(t, ki.Fill(si, h.x.Ptr(), words(h.a.n), h.a.seed+1))
				must(t, h.x.Release(si))
				if err := h.x.Release(si); !errors.Is(err, ipc.ErrReleased) {
					t.Fatalf("a second Release: %v, want ipc.ErrReleased", err)
				}
				back(h.a)
				if bad := mismatches(t, exp, ke, se, h.a.p, words(h.a.n), h.a.seed+1); bad != 0 {
					t.Fatalf("the exporter read %d words not the importer's", bad)
				}
			case 4: // reap
				must(t, im.Reap())
			case 5: // free
				if len(allocs) == 0 {
					continue
				}
				i := arg % len(allocs)
				a := allocs[i]
				err := e.Deallocate(a.p, a.n, se)
				if a.loan != nil {
					if !errors.Is(err, ipc.ErrLent) {
						t.Fatalf("freeing a lent range: %v, want ipc.ErrLent", err)
					}
					continue
				}
				must(t, err)
				allocs = append(allocs[:i], allocs[i+1:]...)
			}
			if got := im.Outstanding(); got != len(imports) {
				t.Fatalf("the importer holds %d imports, the model %d", got, len(imports))
			}
		}
		// Everything back and freed.
		for _, a := range sent {
			x, err := im.Receive(ctx, si)
			must(t, err)
			imports = append(imports, held{x, a})
		}
		for _, h := range imports {
			must(t, h.x.Release(si))
			back(h.a)
		}
		for _, a := range allocs {
			must(t, e.Deallocate(a.p, a.n, se))
		}
		must(t, si.Synchronize())
		must(t, im.Reap())
		if n := im.Unmapping(); n != 0 {
			t.Errorf("%d released imports mapped after their work", n)
		}
		must(t, im.Close())
		<-l.Done()
		must(t, e.Close())
		must(t, v.ReleaseContext(ctx))
		if st := v.Stats(); st.Mapped != 0 || st.Live != 0 {
			t.Errorf("the Virtual at the end: %d bytes mapped, %d live", st.Mapped, st.Live)
		}
		if n := openDescriptors(t); n != fds {
			t.Errorf("%d descriptors open, %d before", n, fds)
		}
	})
}
