package replay

import (
	"context"
	"io"
	"testing"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/trace"
)

// Peak reserved bytes come from the first resource of the adaptor chain
// that reports usage, so a pool replayed behind the logging adaptor
// reports what the bare pool does, not the live bytes.
func TestPeakReservedThroughAdaptors(t *testing.T) {
	const file = "testdata/torch-serve-varlen-b.csv.gz"
	run := func(wrap bool) *Result {
		dev, err := sim.New(sim.Config{}).Device(0)
		if err != nil {
			t.Fatal(err)
		}
		pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		var res mr.Resource = pool
		if wrap {
			res = mr.NewLogging(pool, io.Discard, mr.LoggingOptions{})
		}
		f, err := trace.Open(file, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		r, err := Run(context.Background(), f, dev, res, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	bare, logged := run(false), run(true)
	if bare.PeakReservedBytes <= bare.PeakLiveBytes {
		t.Fatalf("bare pool: peak reserved %d <= peak live %d; the test would prove nothing", bare.PeakReservedBytes, bare.PeakLiveBytes)
	}
	if logged.PeakReservedBytes != bare.PeakReservedBytes {
		t.Errorf("behind the logging adaptor peak reserved = %d, bare pool %d", logged.PeakReservedBytes, bare.PeakReservedBytes)
	}
}
