package mr_test

import (
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// FuzzAdaptorStack runs operation sequences, good and bad, through a stack
// of every adaptor and checks each result and every counter against a
// reference model: a map of live allocations, the budget they are charged,
// and the last frees.
func FuzzAdaptorStack(f *testing.F) {
	f.Add([]byte{0, 8, 16, 2, 3, 4, 5, 6, 10, 18})
	f.Add([]byte{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 5, 5, 2, 2})
	f.Add([]byte{0xf8, 0xf8, 0xf8, 0, 2, 0xfa, 5, 3, 4})
	const budget = 16 << 10
	f.Fuzz(func(t *testing.T, ops []byte) {
		up := newRecording()
		s := up.stream()
		var r mr.Resource = mr.NewRetry(up, mr.RetryOptions{Attempts: 1})
		r = mr.NewLogging(r, io.Discard, mr.LoggingOptions{})
		r = mr.NewTracking(r, mr.TrackingOptions{})
		hist := mr.NewHistory(r, mr.HistoryOptions{})
		r, _ = mr.NewAligned(hist, 512)
		lim := mr.NewLimit(r, mr.NewBudget(budget))
		st := mr.NewStats(lim, mr.StatsOptions{})

		type al struct {
			p    gpu.DevicePtr
			size int
		}
		var live []al
		var lastFreed []gpu.DevicePtr
		var charged uint64
		var allocs, frees uint64 // granted and accepted, for the history's count
		isLive := func(p gpu.DevicePtr) bool {
			return slices.ContainsFunc(live, func(a al) bool { return a.p == p })
		}
		for i, op := range ops {
			arg := int(op >> 3)
			switch op & 7 {
			case 0, 1:
				size := (arg + 1) * 100
				c := uint64((size + 255) &^ 255)
				p, err := st.Allocate(size, s)
				if charged+c > budget {
					if !errors.Is(err, mr.ErrOutOfMemory) {
						t.Fatalf("op %d: over budget: %#x, %v", i, p, err)
					}
					continue
				}
				if err != nil || p == 0 || p%512 != 0 || isLive(p) {
					t.Fatalf("op %d: Allocate(%d) = %#x, %v", i, size, p, err)
				}
				live = append(live, al{p, size})
				allocs++
				charged += c
				lastFreed = slices.DeleteFunc(lastFreed, func(q gpu.DevicePtr) bool { return q == p })
			case 2:
				if len(live) == 0 {
					continue
				}
				j := arg % len(live)
				a := live[j]
				if err := st.Deallocate(a.p, a.size, s); err != nil {
					t.Fatalf("op %d: free: %v", i, err)
				}
				live = slices.Delete(live, j, j+1)
				frees++
				charged -= uint64((a.size + 255) &^ 255)
				lastFreed = append(lastFreed, a.p)
				if len(lastFreed) > 8 {
					lastFreed = lastFreed[1:]
				}
			case 3:
				if len(live) == 0 {
					continue
				}
				a := live[arg%len(live)]
				if err := st.Deallocate(a.p, a.size+1+arg, s); !errors.Is(err, mr.ErrSizeMismatch) {
					t.Fatalf("op %d: wrong size: %v", i, err)
				}
			case 4:
				p := gpu.DevicePtr(0x7000_0000_0000 + arg*512)
				if err := st.Deallocate(p, 100, s); !errors.Is(err, mr.ErrUnknownPointer) {
					t.Fatalf("op %d: unknown pointer: %v", i, err)
				}
			case 5:
				if len(lastFreed) == 0 {
					continue
				}
				p := lastFreed[arg%len(lastFreed)]
				if err := st.Deallocate(p, 100, s); !errors.Is(err, mr.ErrDoubleFree) {
					t.Fatalf("op %d: double free of %#x: %v", i, p, err)
				}
			case 6:
				if p, err := st.Allocate(0, s); p != 0 || err != nil {
					t.Fatalf("op %d: Allocate(0) = %#x, %v", i, p, err)
				}
			case 7:
				if _, err := st.Allocate(-1-arg, s); !errors.Is(err, mr.ErrInvalidSize) {
					t.Fatalf("op %d: negative size: %v", i, err)
				}
			}
			var bytes uint64
			for _, a := range live {
				bytes += uint64(a.size)
			}
			snap := st.Snapshot()
			if snap.Bytes.Current != bytes || snap.Allocations.Current != uint64(len(live)) ||
				lim.Used() != charged || lim.Budget().Used() != charged || up.liveCount() != len(live) {
				t.Fatalf("op %d: stats %+v, limit %d, upstream %d live; model %d bytes in %d, charged %d",
					i, snap, lim.Used(), up.liveCount(), bytes, len(live), charged)
			}
			// One event per allocation, two per free (requested and
			// completed); nothing for bad input.
			if hs := hist.Stats(); hs.Recorded != allocs+2*frees {
				t.Fatalf("op %d: history recorded %d events, model %d allocations and %d frees", i, hs.Recorded, allocs, frees)
			}
		}
	})
}
