// The bounded time series of a replay.
//
// A series of at most max points must describe a trace of any length,
// without knowing the length in advance. Points are buckets of stride
// consecutive events holding the maxima of live and reserved bytes over
// the bucket. When max points are full, adjacent pairs merge (maxima of
// maxima) and the stride doubles, so the buckets stay contiguous and
// aligned, the series keeps between max/2 and max points, and the peak of
// any stretch of events survives every merge. Memory is O(max), work per
// event O(1) amortized.

package replay

import "time"

type series struct {
	max    int
	stride int64 // events per completed point
	pts    []Sample
	cur    Sample // the bucket being filled
	n      int64  // events in cur
}

func newSeries(max int) *series {
	if max < 2 {
		max = 2
	}
	max += max % 2
	return &series{max: max, stride: 1, pts: make([]Sample, 0, max)}
}

// add records the state after event.
func (s *series) add(event int64, t time.Duration, live, reserved uint64) {
	if s.n == 0 {
		s.cur = Sample{Event: event, Live: live, Reserved: reserved, Time: t}
	} else {
		s.cur.Event = event
		s.cur.Time = t
		s.cur.Live = max(s.cur.Live, live)
		s.cur.Reserved = max(s.cur.Reserved, reserved)
	}
	s.n++
	if s.n == s.stride {
		s.push()
	}
}

func (s *series) push() {
	s.pts = append(s.pts, s.cur)
	s.n = 0
	if len(s.pts) < s.max {
		return
	}
	// Merge pairs: max is even, so every point has a partner.
	for i := 0; i < len(s.pts)/2; i++ {
		a, b := s.pts[2*i], s.pts[2*i+1]
		s.pts[i] = Sample{Event: b.Event, Live: max(a.Live, b.Live), Reserved: max(a.Reserved, b.Reserved), Time: b.Time}
	}
	s.pts = s.pts[:len(s.pts)/2]
	s.stride *= 2
}

// samples returns the series, the partly filled last bucket included.
func (s *series) samples() []Sample {
	if s.n > 0 {
		s.push()
	}
	return s.pts
}
