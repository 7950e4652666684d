package mr_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

func TestChainAndReclaim(t *testing.T) {
	up := newRecording()
	up.pending = 4096
	st := mr.NewStats(up, mr.StatsOptions{})
	tr := mr.NewTracking(st, mr.TrackingOptions{})
	chain := mr.Chain(tr)
	if len(chain) != 3 || chain[0] != mr.Resource(tr) || chain[1] != mr.Resource(st) || chain[2] != mr.Resource(up) {
		t.Fatalf("Chain = %v", chain)
	}

	// Adaptors forward Release and Reap to what they wrap.
	if err := tr.Release(); err != nil || up.released != 1 {
		t.Fatalf("Release through two adaptors: %v, upstream released %d times", err, up.released)
	}
	if n, err := tr.Reap(true); n != 4096 || err != nil {
		t.Fatalf("Reap through two adaptors = %d, %v", n, err)
	}

	// Reclaim reaps and releases each resource once, skipping the
	// forwarding adaptors.
	up.pending = 1024
	n, err := mr.Reclaim(tr, false)
	if n != 0 || err != nil || up.released != 2 || !slices.Equal(up.reaps, []bool{true, false}) {
		t.Fatalf("Reclaim(false) = %d, %v; released %d, reaps %v", n, err, up.released, up.reaps)
	}
	n, err = mr.Reclaim(tr, true)
	if n != 1024 || err != nil || up.released != 3 || len(up.reaps) != 3 {
		t.Fatalf("Reclaim(true) = %d, %v; released %d, reaps %v", n, err, up.released, up.reaps)
	}
}

// loopResource wraps itself: Chain must stop.
type loopResource struct{ *recordingResource }

func (l loopResource) Upstream() mr.Resource { return l }

func TestChainLoopStops(t *testing.T) {
	if n := len(mr.Chain(loopResource{newRecording()})); n != 64 {
		t.Fatalf("Chain of a loop has %d entries", n)
	}
}

type failingReleaser struct{ *recordingResource }

func (f *failingReleaser) Release() error { return gpu.ErrLaunchFailed }

func TestReclaimGoesOnPastErrors(t *testing.T) {
	f := &failingReleaser{newRecording()}
	f.pending = 512
	n, err := mr.Reclaim(mr.NewStats(f, mr.StatsOptions{}), true)
	if n != 512 || !errors.Is(err, gpu.ErrLaunchFailed) {
		t.Fatalf("Reclaim = %d, %v", n, err)
	}
}
