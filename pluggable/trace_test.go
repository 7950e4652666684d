package pluggable

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/streamalloc/streamalloc/trace"
)

// TestTorchTraces replays the memory histories that PyTorch training
// wrote through the C ABI on an H100 (the log= option; the first steps of
// GPT-2 and ResNet-50 in BENCHMARKS.md) through the allocator, as the host
// calls it: the figures follow the trace exactly (peak live bytes computed
// from the trace itself), no call fails, and everything freed leaves
// nothing live. The pool's device allocations (its growths) are logged:
// they show the chunk churn BENCHMARKS.md reports.
func TestTorchTraces(t *testing.T) {
	files, _ := filepath.Glob("testdata/torch-*.csv.gz")
	if len(files) == 0 {
		t.Fatal("no traces in testdata")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			z, err := gzip.NewReader(f)
			if err != nil {
				t.Fatal(err)
			}
			r := trace.NewCSVReader(z, file)
			a, _ := newSim(t, "pool")
			type block struct {
				p    uintptr
				size uint64
			}
			live := map[uint64]block{}
			var cur, peak uint64
			for {
				ev, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				switch ev.Op {
				case trace.Alloc:
					p := a.Alloc(uint64(ev.Size), 0, 0)
					if p == 0 {
						t.Fatalf("alloc %d: %s", ev.Size, a.LastError())
					}
					live[ev.Ptr] = block{p, uint64(ev.Size)}
					cur += uint64(ev.Size)
					peak = max(peak, cur)
				case trace.Free:
					b, ok := live[ev.Ptr]
					if !ok {
						t.Fatalf("trace frees %#x, never allocated", ev.Ptr)
					}
					if err := a.Free(b.p, b.size, 0, 0); err != nil {
						t.Fatal(err)
					}
					delete(live, ev.Ptr)
					cur -= b.size
				}
			}
			st := stats(t, a, 0)
			if st.Live != cur || st.PeakLive != peak || st.BadFrees != 0 || st.Errors != 0 || st.OOMs != 0 {
				t.Fatalf("stats %+v; the trace says live %d, peak %d", st, cur, peak)
			}
			for _, b := range live {
				if err := a.Free(b.p, b.size, 0, 0); err != nil {
					t.Fatal(err)
				}
			}
			if st := stats(t, a, 0); st.Live != 0 || st.LiveAllocs != 0 {
				t.Fatalf("after freeing everything: %+v", st)
			}
			t.Logf("peak reserved / peak live %.3f; %d device allocations and %d frees for %d allocations",
				float64(st.PeakReserved)/float64(st.PeakLive), st.DeviceAllocs, st.DeviceFrees, st.Allocs)
		})
	}
}
