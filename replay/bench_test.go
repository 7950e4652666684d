package replay

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/trace"
)

// BenchmarkRun replays torch-serve-varlen-b (18102 events) from memory
// per iteration and reports the cost per event: "ns/event" is the whole
// replay (parsing, bookkeeping, resource), "resource-ns/event" what Run
// reports as NsPerEvent.
func BenchmarkRun(b *testing.B) {
	data, err := os.ReadFile("testdata/torch-serve-varlen-b.csv.gz")
	if err != nil {
		b.Fatal(err)
	}
	for _, rs := range simResources {
		b.Run(rs.name, func(b *testing.B) {
			dev, err := sim.New(sim.Config{}).Device(0)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var events int64
			var resNs float64
			for b.Loop() {
				tr, _, err := trace.NewReader(bytes.NewReader(data), "bench", nil)
				if err != nil {
					b.Fatal(err)
				}
				r, err := Run(context.Background(), tr, dev, rs.make(b, dev), Options{})
				if err != nil {
					b.Fatal(err)
				}
				events += r.Events
				resNs += r.NsPerEvent * float64(r.Events)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
			b.ReportMetric(resNs/float64(events), "resource-ns/event")
		})
	}
	b.Run("fake", func(b *testing.B) {
		b.ReportAllocs()
		var events int64
		for b.Loop() {
			tr, _, err := trace.NewReader(bytes.NewReader(data), "bench", nil)
			if err != nil {
				b.Fatal(err)
			}
			dev := &fakeDevice{}
			r, err := Run(context.Background(), tr, dev, newFakeResource(dev, 1<<40), Options{})
			if err != nil {
				b.Fatal(err)
			}
			events += r.Events
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
	})
}
