package mrprom_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/mrprom"
)

// TestForChain: one call finds the Stats adaptor, the pool's usage and
// counters in a stack on device 1 and labels them with the device.
func TestForChain(t *testing.T) {
	b := sim.New(sim.Config{Devices: 2})
	dev, err := b.Device(1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := mr.NewStats(pool, mr.StatsOptions{})
	top := mr.NewRetry(st, mr.RetryOptions{})
	c, err := mrprom.ForChain(top, mrprom.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := top.Allocate(3000, s)
	if err != nil {
		t.Fatal(err)
	}
	defer top.Deallocate(p, 3000, s)
	want := `
# HELP streamalloc_live_bytes Bytes handed out and not freed.
# TYPE streamalloc_live_bytes gauge
streamalloc_live_bytes{device="1"} 3000
# HELP streamalloc_reserved_bytes Bytes the resource holds from its upstream or the driver.
# TYPE streamalloc_reserved_bytes gauge
streamalloc_reserved_bytes{device="1"} 2.097152e+06
# HELP streamalloc_used_bytes Bytes of the reserved ones handed out.
# TYPE streamalloc_used_bytes gauge
streamalloc_used_bytes{device="1"} 3000
# HELP streamalloc_pool_growths_total Chunks allocated from the upstream.
# TYPE streamalloc_pool_growths_total counter
streamalloc_pool_growths_total{device="1"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "streamalloc_live_bytes",
		"streamalloc_reserved_bytes", "streamalloc_used_bytes", "streamalloc_pool_growths_total"); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}

	// A label of the caller's is kept, device included.
	c2, err := mrprom.ForChain(top, mrprom.Options{ConstLabels: prometheus.Labels{"device": "gpu1", "stack": "main"}})
	if err != nil {
		t.Fatal(err)
	}
	want2 := fmt.Sprintf(`
# HELP streamalloc_live_bytes Bytes handed out and not freed.
# TYPE streamalloc_live_bytes gauge
streamalloc_live_bytes{device="gpu1",stack="main"} %d
`, 3000)
	if err := testutil.CollectAndCompare(c2, strings.NewReader(want2), "streamalloc_live_bytes"); err != nil {
		t.Fatal(err)
	}

	// Without a Stats adaptor: the resource's own usage.
	c3, err := mrprom.ForChain(mr.NewDirect(dev), mrprom.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c3); n != 4 {
		t.Errorf("a bare direct resource exported %d metrics, want its 4 usage gauges", n)
	}
	if _, err := mrprom.ForChain(nil, mrprom.Options{}); err == nil {
		t.Error("a collector of nil was made")
	}
}
