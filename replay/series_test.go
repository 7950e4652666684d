package replay

import (
	"math/rand/v2"
	"testing"
	"time"
)

// checkSeries compares the series of values (live[i], reserved[i] after
// event i) with the reference: points are contiguous runs of events, in
// order, covering all of them, each holding the maxima of its run.
func checkSeries(t *testing.T, maxPoints int, live, reserved []uint64) {
	t.Helper()
	s := newSeries(maxPoints)
	for i := range live {
		s.add(int64(i), eventTime(i), live[i], reserved[i])
	}
	pts := s.samples()
	limit := max(2, maxPoints+maxPoints%2)
	if len(live) == 0 {
		if len(pts) != 0 {
			t.Fatalf("points %v for no events", pts)
		}
		return
	}
	if len(pts) > limit || len(pts) == 0 {
		t.Fatalf("%d points for %d events, limit %d", len(pts), len(live), limit)
	}
	if len(live) >= limit && len(pts) < limit/2 {
		t.Fatalf("only %d points for %d events, limit %d", len(pts), len(live), limit)
	}
	from := int64(0)
	for k, p := range pts {
		if p.Event < from || p.Event >= int64(len(live)) {
			t.Fatalf("point %d ends at event %d, after %d of %d", k, p.Event, from, len(live))
		}
		var l, r uint64
		for i := from; i <= p.Event; i++ {
			l, r = max(l, live[i]), max(r, reserved[i])
		}
		if p.Time != eventTime(int(p.Event)) {
			t.Fatalf("point %d ends at event %d: time %v, want that event's, %v", k, p.Event, p.Time, eventTime(int(p.Event)))
		}
		if p.Live != l || p.Reserved != r {
			t.Fatalf("point %d (events %d..%d): %d/%d, want maxima %d/%d", k, from, p.Event, p.Live, p.Reserved, l, r)
		}
		from = p.Event + 1
	}
	if from != int64(len(live)) {
		t.Fatalf("points end at event %d of %d", from-1, len(live))
	}
}

// eventTime is the time the series tests give event i.
func eventTime(i int) time.Duration { return time.Duration(i)*time.Millisecond + 3 }

func TestSeries(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, maxPoints := range []int{0, 1, 2, 3, 7, 10, 64} {
		for _, n := range []int{0, 1, 2, 5, 9, 10, 11, 63, 64, 65, 1000, 4097} {
			live := make([]uint64, n)
			res := make([]uint64, n)
			for i := range live {
				live[i] = rng.Uint64N(1000)
				res[i] = rng.Uint64N(1000)
			}
			checkSeries(t, maxPoints, live, res)
		}
	}
}

func FuzzSeries(f *testing.F) {
	f.Add(uint8(4), []byte{1, 5, 3, 9, 2, 2, 7, 0, 8})
	f.Add(uint8(0), []byte{})
	f.Add(uint8(255), []byte("some events of some length"))
	f.Fuzz(func(t *testing.T, maxPoints uint8, data []byte) {
		live := make([]uint64, len(data))
		res := make([]uint64, len(data))
		for i, b := range data {
			live[i] = uint64(b & 0x0f)
			res[i] = uint64(b >> 4)
		}
		checkSeries(t, int(maxPoints), live, res)
	})
}
