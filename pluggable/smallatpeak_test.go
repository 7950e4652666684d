package pluggable

import (
	"testing"
)

// TestSmallAtPeakGenerate replays the Llama generation recorded on an
// H100 through the pool over Virtual with mapped_slack, with and without
// small_at_peak (mr.PoolOptions.SmallAtPeak). With it, the small
// requests that would grow a small chunk at the mapped high-water mark
// take free room of the growable range: the peak is 1.0289 of peak live
// on every run measured (1.0339 without), with fewer device calls.
func TestSmallAtPeakGenerate(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("replays 120,000 calls twice")
	}
	evs, nstreams := readRecorded(t, "../testdata/traces/llama-generate-h100.csv.gz")
	off := replayRecorded(t, evs, nstreams, "pool,upstream=vmm,mapped_slack")
	a, _ := newSim(t, "pool,upstream=vmm,mapped_slack,small_at_peak")
	on := replayRecordedOn(t, a, evs, nstreams)
	ratio := func(st Stats) float64 { return float64(st.PeakReserved) / float64(st.PeakLive) }
	if r := ratio(on.st); r > 1.029 || r >= ratio(off.st) {
		t.Errorf("small_at_peak: peak reserved / peak live %.4f; want at most 1.029 and below %.4f without it", r, ratio(off.st))
	}
	if on.st.DeviceAllocs >= off.st.DeviceAllocs {
		t.Errorf("small_at_peak: %d device allocations, without it %d; want fewer", on.st.DeviceAllocs, off.st.DeviceAllocs)
	}
	if n := a.devs[0].Load().pool.Stats().SmallAtPeak; n == 0 {
		t.Error("small_at_peak: no small request served from a growable range")
	}
}
