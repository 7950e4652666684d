package replay

import (
	"context"
	"math"
	"testing"

	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr/registry"
	"github.com/streamalloc/streamalloc/trace"
	_ "github.com/streamalloc/streamalloc/trace/torchsnap" // the snapshots
)

// fidelity is BENCHMARKS.md's fidelity table: the peak reserved bytes of
// the driver's pool (the registry's "async": an mr.Async on a pool of its
// own, `streamalloc replay --resource async`) on each trace, measured on an
// H100 (driver 580, 2026-11-24, docs/bench/h100-2026-11-24-fidelity) and
// given by the simulator's model of the pool (gpu/sim/pool.go). The model
// must stay within fidelityTolerance of the card on every trace.
var fidelity = []struct {
	file      string
	card, sim uint64
}{
	{"testdata/torch-pipeline-2stream-b.csv.gz", 1711276032, 1644167168},
	{"testdata/torch-serve-varlen-b.csv.gz", 402653184, 402653184},
	{"testdata/torch-train-gpt-b.csv.gz", 2583691264, 2650800128},
	// PyTorch 2.11 snapshots recorded on the H100 (testdata/traces/README.md).
	{"../testdata/traces/cuda-graph-h100.pickle.gz", 469762048, 469762048},
	{"../testdata/traces/gpt2-train-h100.pickle.gz", 14159970304, 14126415872},
	{"../testdata/traces/llama-generate-h100.csv.gz", 503316480, 503316480},
	{"../testdata/traces/oom-h100.pickle.gz", 10099884032, 10133438464},
	{"../testdata/traces/resnet50-amp-h100.pickle.gz", 3825205248, 3892314112},
	{"../testdata/traces/three-stream-h100.pickle.gz", 1275068416, 1275068416},
}

// fidelityTolerance is how far, relatively, the simulator's figure may be
// from the card's.
const fidelityTolerance = 0.05

// relDiff is |a/b - 1|.
func relDiff(a, b uint64) float64 { return math.Abs(float64(a)/float64(b) - 1) }

// On the simulator (the default) each trace reserves exactly the pinned
// figure, which is within 5% of the card's; on the GPU (STREAMALLOC_DEVICE
// =cuda, scripts/gpu-run.sh) the card reserves within 5% of the
// simulator's figure, so a driver that changed its pool shows here.
func TestPoolFidelity(t *testing.T) {
	for _, tc := range fidelity {
		t.Run(tc.file, func(t *testing.T) {
			if testdev.Kind() == "sim" {
				// Each replay has a simulator of its own; the snapshots
				// take a second or two each. On the card they run one at
				// a time, each on a pool of its own.
				t.Parallel()
			}
			if d := relDiff(tc.sim, tc.card); d > fidelityTolerance {
				t.Fatalf("table: simulated %d is %.1f%% from the card's %d", tc.sim, 100*d, tc.card)
			}
			dev := testdev.Device(t)
			res, closeRes, err := registry.New("async", dev, registry.Options{})
			if err != nil {
				t.Fatal(err)
			}
			f, err := trace.Open(tc.file, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			r, err := Run(context.Background(), f, dev, res, Options{Resource: "async"})
			if cerr := closeRes(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
			simulated := dev.Properties().Simulated
			t.Logf("%s: peak reserved %d (%.3f of peak live); table: card %d, simulator %d (%+.1f%%)",
				dev.Properties().Name, r.PeakReservedBytes, r.Fragmentation, tc.card, tc.sim, 100*(float64(tc.sim)/float64(tc.card)-1))
			switch {
			case simulated && r.PeakReservedBytes != tc.sim:
				t.Errorf("simulator reserves %d, the table says %d: update the table and BENCHMARKS.md", r.PeakReservedBytes, tc.sim)
			case !simulated && relDiff(r.PeakReservedBytes, tc.sim) > fidelityTolerance:
				t.Errorf("the card reserves %d, %.1f%% from the simulator's %d (table's card figure %d)",
					r.PeakReservedBytes, 100*relDiff(r.PeakReservedBytes, tc.sim), tc.sim, tc.card)
			}
		})
	}
}
