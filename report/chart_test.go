package report

import (
	"fmt"
	"math"
	"testing"

	"github.com/streamalloc/streamalloc/replay"
)

func TestThin(t *testing.T) {
	mk := func(n int) []replay.Sample {
		s := make([]replay.Sample, n)
		for i := range s {
			// A zigzag, so that a merged point is not just its last one.
			s[i] = replay.Sample{Event: int64(3*i + 2), Live: uint64((i * 7919) % 101), Reserved: uint64((i * 104729) % 997)}
		}
		return s
	}
	for _, tc := range []struct{ n, max, want int }{
		{0, 10, 0}, {5, 10, 5}, {10, 10, 10}, {11, 10, 10}, {20, 10, 10}, {21, 10, 10}, {4001, 2000, 2000}, {100000, 2000, 2000},
	} {
		t.Run(fmt.Sprint(tc.n, "/", tc.max), func(t *testing.T) {
			s := mk(tc.n)
			got := thin(s, tc.max)
			if len(got) != tc.want {
				t.Fatalf("%d points, want %d", len(got), tc.want)
			}
			if tc.n == 0 {
				return
			}
			// Reference: each output point is the maxima of a contiguous
			// run ending at its event; runs cover the input in order.
			j := 0
			for _, p := range got {
				var live, res uint64
				for ; j < len(s) && s[j].Event <= p.Event; j++ {
					live, res = max(live, s[j].Live), max(res, s[j].Reserved)
				}
				if p.Live != live || p.Reserved != res {
					t.Fatalf("point %+v: maxima of its run are %d, %d", p, live, res)
				}
			}
			if j != len(s) || got[len(got)-1].Event != s[len(s)-1].Event {
				t.Fatalf("runs cover %d of %d points; last event %d", j, len(s), got[len(got)-1].Event)
			}
		})
	}
}

func TestNiceTicks(t *testing.T) {
	labels := func(ts niceTicks, lo, hi float64) []string {
		var out []string
		for _, tk := range ts.Ticks(lo, hi) {
			out = append(out, tk.Label)
		}
		return out
	}
	for _, tc := range []struct {
		ticks  niceTicks
		lo, hi float64
		want   string
	}{
		{niceTicks{target: 8, group: true}, 0, 18101, "[0 2,000 4,000 6,000 8,000 10,000 12,000 14,000 16,000 18,000]"},
		{niceTicks{target: 6}, 0, 1.55, "[0.0 0.2 0.4 0.6 0.8 1.0 1.2 1.4]"},
		{niceTicks{target: 6}, 0, 300, "[0 50 100 150 200 250 300]"},
		{niceTicks{target: 6}, 0, 1, "[0.0 0.2 0.4 0.6 0.8 1.0]"},
		{niceTicks{target: 4, group: true}, -2500, 2500, "[-2,000 -1,000 0 1,000 2,000]"},
		{niceTicks{target: 4, group: true}, 0, 1.5e7, "[0 5,000,000 10,000,000 15,000,000]"},
		{niceTicks{target: 6}, 5, 5, "[]"},
		{niceTicks{target: 6}, 5, 1, "[]"},
		{niceTicks{target: 6}, 0, math.Inf(1), "[]"},
		{niceTicks{target: 6}, math.NaN(), 1, "[]"},
		{niceTicks{target: 0}, 0, 1, "[]"},
	} {
		if got := fmt.Sprint(labels(tc.ticks, tc.lo, tc.hi)); got != tc.want {
			t.Errorf("%+v.Ticks(%g, %g) = %s, want %s", tc.ticks, tc.lo, tc.hi, got, tc.want)
		}
	}
}

func TestByteFormats(t *testing.T) {
	for _, tc := range []struct {
		n            uint64
		unit         string
		human, exact string
	}{
		{0, "B", "0 B", "0"},
		{1023, "B", "1023 B", "1,023"},
		{1024, "KiB", "1.0 KiB", "1,024"},
		{294640904, "MiB", "281.0 MiB", "294,640,904"},
		{1597126984, "GiB", "1.5 GiB", "1,597,126,984"},
		{3 << 40, "TiB", "3.0 TiB", "3,298,534,883,328"},
		{math.MaxUint64, "TiB", "16777216.0 TiB", "18,446,744,073,709,551,615"},
	} {
		if u := unitFor(tc.n); u.name != tc.unit {
			t.Errorf("unitFor(%d) = %s, want %s", tc.n, u.name, tc.unit)
		}
		if c := newBytesCell(tc.n); c.Human != tc.human || c.Exact != tc.exact {
			t.Errorf("newBytesCell(%d) = %+v, want %s / %s", tc.n, c, tc.human, tc.exact)
		}
	}
}
