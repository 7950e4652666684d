// Axis ticks at round values with short labels.
//
// gonum's default ticker aims at three labels and prints a fixed number of
// decimals ("2500.00" on an axis of event indexes), and it panics on an
// empty range. niceTicks puts about target labels (the count nearest target) at multiples of 1, 2 or
// 5 times a power of ten, prints each with just the decimals that step
// needs, optionally groups thousands, and returns no ticks (never panics)
// for an empty, inverted or non-finite range.

package report

import (
	"math"
	"strconv"

	"gonum.org/v1/plot"
)

type niceTicks struct {
	target int  // about how many labelled ticks
	group  bool // group thousands with commas (event indexes)
}

// Ticks implements plot.Ticker.
func (t niceTicks) Ticks(lo, hi float64) []plot.Tick {
	step := t.step(lo, hi)
	if step == 0 {
		return nil
	}
	decimals := max(0, -int(math.Floor(math.Log10(step))))
	first := math.Ceil(lo/step) * step
	// The epsilon keeps a tick at hi that rounding put a hair above it;
	// the bound keeps rounding from ever making many.
	n := min(int(math.Floor((hi-first)/step+1e-9))+1, 4*t.target)
	ticks := make([]plot.Tick, 0, max(n, 0))
	for i := range max(n, 0) {
		v := first + float64(i)*step
		if math.Abs(v) < step/2 { // print 0, not -1e-17
			v = 0
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: formatTick(v, decimals, t.group)})
	}
	return ticks
}

// formatTick prints v with decimals digits after the point, grouping the
// integer part's thousands if group is set.
func formatTick(v float64, decimals int, group bool) string {
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if !group || math.Abs(v) < 1000 {
		return s
	}
	sign := ""
	if s[0] == '-' {
		sign, s = "-", s[1:]
	}
	frac := ""
	for i := range s {
		if s[i] == '.' {
			s, frac = s[:i], s[i:]
			break
		}
	}
	return sign + groupString(s) + frac
}

// step returns the distance between labelled ticks on [lo, hi]: of 1, 2,
// 5 and 10 times a power of ten near (hi-lo)/target, the one giving the
// count of ticks closest to target; 0 when there is none.
func (t niceTicks) step(lo, hi float64) float64 {
	if !(hi > lo) || math.IsInf(lo, 0) || math.IsInf(hi, 0) || t.target < 1 {
		return 0
	}
	raw := (hi - lo) / float64(t.target)
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * pow
	for _, m := range []float64{5, 2, 1} {
		if s := m * pow; math.Abs((hi-lo)/s-float64(t.target)) <= math.Abs((hi-lo)/step-float64(t.target)) {
			step = s
		}
	}
	if step == 0 || math.IsInf(step, 0) || math.IsNaN(step) {
		return 0
	}
	return step
}
