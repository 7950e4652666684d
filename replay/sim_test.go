package replay

import (
	"context"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/trace"
)

// simResources are the resources the command offers, built on dev.
var simResources = []struct {
	name string
	make func(t testing.TB, dev gpu.Device) mr.Resource
}{
	{"direct", func(t testing.TB, dev gpu.Device) mr.Resource { return mr.NewDirect(dev) }},
	{"async", func(t testing.TB, dev gpu.Device) mr.Resource {
		r, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}},
	{"pool", func(t testing.TB, dev gpu.Device) mr.Resource {
		r, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}},
	{"arena", func(t testing.TB, dev gpu.Device) mr.Resource {
		r, err := mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}},
	{"binning", func(t testing.TB, dev gpu.Device) mr.Resource {
		r, err := mr.NewBinning(mr.NewDirect(dev), mr.BinningOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}},
}

// simPeakReserved pins the peak reserved bytes of every resource. They are
// the figures of BENCHMARKS.md's replay table (fragmentation = these over
// the trace's peak live bytes). Direct and the suballocators, which take
// their chunks from mr.Direct and decide everything on the host, reserve
// the same on the H100 (docs/bench/h100-2026-11-22/replay-cuda.json);
// async is the simulator's model of the driver's pool, which does not
// depend on timing either: a free that nothing slow precedes counts as
// complete (gpu/sim, op.due); fidelity_test.go holds the card's figures
// next to it.
var simPeakReserved = map[string]map[string]uint64{
	"testdata/torch-pipeline-2stream-b.csv.gz": {"direct": 940326920, "async": 1644167168, "pool": 975175680, "arena": 952107008, "binning": 1094090752},
	"testdata/torch-serve-varlen-b.csv.gz":     {"direct": 294640904, "async": 402653184, "pool": 304087040, "arena": 307036160, "binning": 558661632},
	"testdata/torch-train-gpt-b.csv.gz":        {"direct": 1597126984, "async": 2650800128, "pool": 1730150400, "arena": 1637761024, "binning": 1778302976},
}

// Every shared trace replays on the simulator with every resource to the
// counts computed by awk (traces_test.go); the resource reserves at least
// the peak live bytes, exactly simPeakReserved,
// and holds nothing after the replay.
func TestSharedTracesOnSim(t *testing.T) {
	for _, tc := range sharedTraces {
		for _, rs := range simResources {
			t.Run(rs.name+"/"+tc.file, func(t *testing.T) {
				dev, err := sim.New(sim.Config{}).Device(0)
				if err != nil {
					t.Fatal(err)
				}
				res := rs.make(t, dev)
				f, err := trace.Open(tc.file, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				r, err := Run(context.Background(), f, dev, res, Options{Resource: rs.name, SeriesPoints: 100})
				if err != nil {
					t.Fatal(err)
				}
				if r.Events != tc.events || r.Allocations != tc.allocs || r.Frees != tc.frees ||
					r.UnknownFrees != tc.unknown || r.FreedAtEnd != tc.atEnd || r.Streams != tc.streams ||
					r.PeakLiveBytes != tc.peakLive || r.Failures != 0 {
					t.Errorf("got %+v\nwant %+v", r, tc)
				}
				if r.PeakReservedBytes < r.PeakLiveBytes {
					t.Errorf("peak reserved %d below peak live %d", r.PeakReservedBytes, r.PeakLiveBytes)
				}
				if want, ok := simPeakReserved[tc.file][rs.name]; ok && r.PeakReservedBytes != want {
					t.Errorf("peak reserved %d, want %d (fragmentation %.3f, want %.3f): update BENCHMARKS.md with this test",
						r.PeakReservedBytes, want, r.Fragmentation, float64(want)/float64(tc.peakLive))
				}
				if u := res.(mr.UsageReporter).Usage(); u.Used != 0 {
					t.Errorf("%d bytes still used after the replay", u.Used)
				}
				t.Logf("%s: peak live %d reserved %d fragmentation %.3f, %.0f ns/event",
					rs.name, r.PeakLiveBytes, r.PeakReservedBytes, r.Fragmentation, r.NsPerEvent)
				if rel, ok := res.(mr.Releaser); ok {
					if err := rel.Release(); err != nil {
						t.Errorf("Release after the replay: %v", err)
					}
				}
			})
		}
	}
}

// On a device too small for the trace, allocations fail with OOM, are
// counted, and the replay completes and cleans up.
func TestOutOfMemoryOnSim(t *testing.T) {
	tc := sharedTraces[2] // peak live 1.6 GB
	dev, err := sim.New(sim.Config{Capacity: 512 << 20}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	res := mr.NewDirect(dev)
	f, err := trace.Open(tc.file, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := Run(context.Background(), f, dev, res, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Failures == 0 || r.Events != tc.events || r.PeakLiveBytes != tc.peakLive || r.UnknownFrees != 0 {
		t.Errorf("got %+v", r)
	}
	if r.PeakReservedBytes > 512<<20 {
		t.Errorf("reserved %d on a 512 MiB device", r.PeakReservedBytes)
	}
	if u := res.Usage(); u.Used != 0 {
		t.Errorf("%d bytes still used", u.Used)
	}
	free, total, err := dev.MemGetInfo()
	if err != nil || free != total {
		t.Errorf("device memory after the replay: %d free of %d (%v)", free, total, err)
	}
}
