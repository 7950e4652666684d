package mrprom_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/mrprom"
)

// A device, stream and resource just real enough for a Stats adaptor.
type device struct{ gpu.Device }

type stream struct {
	gpu.Stream
	id  uint64
	dev gpu.Device
}

func (s *stream) ID() uint64         { return s.id }
func (s *stream) Device() gpu.Device { return s.dev }

type resource struct {
	dev  gpu.Device
	mu   sync.Mutex
	next gpu.DevicePtr
	fail bool
}

func (r *resource) Device() gpu.Device { return r.dev }
func (r *resource) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return 0, &mr.OutOfMemoryError{Resource: "test", Requested: size}
	}
	r.next += 1 << 20
	return r.next, nil
}
func (r *resource) Deallocate(gpu.DevicePtr, int, gpu.Stream) error { return nil }

type usage struct{ u mr.Usage }

func (u usage) Usage() mr.Usage { return u.u }

func setup(t *testing.T) (*mr.Stats, *resource, *stream, *stream) {
	dev := &device{}
	up := &resource{dev: dev}
	st := mr.NewStats(up, mr.StatsOptions{PerStream: true})
	s1, s2 := &stream{id: 3, dev: dev}, &stream{id: 10, dev: dev}
	p, err := st.Allocate(1000, s1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Allocate(500, s2); err != nil {
		t.Fatal(err)
	}
	if err := st.Deallocate(p, 1000, s1); err != nil {
		t.Fatal(err)
	}
	up.fail = true
	if _, err := st.Allocate(64, s2); !errors.Is(err, mr.ErrOutOfMemory) {
		t.Fatal(err)
	}
	return st, up, s1, s2
}

func TestCollector(t *testing.T) {
	st, _, _, _ := setup(t)
	c, err := mrprom.NewCollector(st, mrprom.Options{
		ConstLabels: prometheus.Labels{"device": "0"},
		Usage:       usage{mr.Usage{Reserved: 4096, Used: 500, PeakReserved: 8192, PeakUsed: 1500}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP streamalloc_live_bytes Bytes handed out and not freed.
# TYPE streamalloc_live_bytes gauge
streamalloc_live_bytes{device="0"} 500
# HELP streamalloc_live_bytes_peak High-water mark of the bytes handed out.
# TYPE streamalloc_live_bytes_peak gauge
streamalloc_live_bytes_peak{device="0"} 1500
# HELP streamalloc_allocated_bytes_total Bytes ever handed out.
# TYPE streamalloc_allocated_bytes_total counter
streamalloc_allocated_bytes_total{device="0"} 1500
# HELP streamalloc_live_allocations Allocations handed out and not freed.
# TYPE streamalloc_live_allocations gauge
streamalloc_live_allocations{device="0"} 1
# HELP streamalloc_allocation_failures_total Allocations the upstream refused.
# TYPE streamalloc_allocation_failures_total counter
streamalloc_allocation_failures_total{device="0"} 1
# HELP streamalloc_out_of_memory_total Allocations refused for lack of memory.
# TYPE streamalloc_out_of_memory_total counter
streamalloc_out_of_memory_total{device="0"} 1
# HELP streamalloc_stream_live_bytes Bytes handed out and not freed. Per allocating stream.
# TYPE streamalloc_stream_live_bytes gauge
streamalloc_stream_live_bytes{device="0",stream="10"} 500
streamalloc_stream_live_bytes{device="0",stream="3"} 0
# HELP streamalloc_stream_allocations_total Allocations ever made. Per allocating stream.
# TYPE streamalloc_stream_allocations_total counter
streamalloc_stream_allocations_total{device="0",stream="10"} 1
streamalloc_stream_allocations_total{device="0",stream="3"} 1
# HELP streamalloc_reserved_bytes Bytes the resource holds from its upstream or the driver.
# TYPE streamalloc_reserved_bytes gauge
streamalloc_reserved_bytes{device="0"} 4096
# HELP streamalloc_used_bytes_peak High-water mark of the used bytes.
# TYPE streamalloc_used_bytes_peak gauge
streamalloc_used_bytes_peak{device="0"} 1500
`
	names := []string{"streamalloc_live_bytes", "streamalloc_live_bytes_peak",
		"streamalloc_allocated_bytes_total", "streamalloc_live_allocations",
		"streamalloc_allocation_failures_total", "streamalloc_out_of_memory_total",
		"streamalloc_stream_live_bytes", "streamalloc_stream_allocations_total",
		"streamalloc_reserved_bytes", "streamalloc_used_bytes_peak"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	// Every family is exported: 8 totals, 8 per stream for each of two
	// streams, 4 usage gauges.
	if n := testutil.CollectAndCount(c); n != 8+16+4 {
		t.Fatalf("collected %d metrics", n)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestScrapeHTTP registers the collector, serves the registry on a
// loopback test server and scrapes it as Prometheus would.
func TestScrapeHTTP(t *testing.T) {
	st, _, s1, _ := setup(t)
	reg := prometheus.NewPedanticRegistry()
	c, err := mrprom.NewCollector(st, mrprom.Options{Namespace: "gpu"})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	scrape := func() string {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("scrape: %d, %v", resp.StatusCode, err)
		}
		return string(b)
	}
	body := scrape()
	for _, line := range []string{"gpu_live_bytes 500", "gpu_allocations_total 2",
		`gpu_stream_allocated_bytes_total{stream="3"} 1000`} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("scrape lacks %q:\n%s", line, body)
		}
	}
	// The next scrape sees new activity: the collector keeps no copy.
	if _, err := st.Allocate(100, s1); err == nil {
		t.Fatal("upstream should still be failing")
	}
	if body := scrape(); !strings.Contains(body, "gpu_allocation_failures_total 2\n") {
		t.Errorf("second scrape:\n%s", body)
	}
}

// TestScrapeOpenMetrics scrapes in the OpenMetrics format, which names a
// counter's family without its _total suffix: every family (with a pool
// and usage too) must be declared once, or the exposition is invalid.
func TestScrapeOpenMetrics(t *testing.T) {
	st, _, _, _ := setup(t)
	reg := prometheus.NewPedanticRegistry()
	c, err := mrprom.NewCollector(st, mrprom.Options{
		Usage: usage{mr.Usage{Reserved: 4096, Used: 500}},
		Pool:  poolStats{Allocations: 3, Chunks: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(c)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	defer srv.Close()
	req, err := http.NewRequest("GET", srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/openmetrics-text") {
		t.Fatalf("scrape: %d %q, %v", resp.StatusCode, resp.Header.Get("Content-Type"), err)
	}
	body := string(b)
	seen := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, _, _ := strings.Cut(f, " ")
			if seen[name] {
				t.Errorf("family %s declared twice:\n%s", name, body)
			}
			seen[name] = true
		}
	}
	for _, line := range []string{"streamalloc_live_bytes 500", "streamalloc_allocated_bytes_total 1500",
		"streamalloc_pool_allocations_total 3", "# EOF"} {
		if !strings.Contains(body, line) {
			t.Errorf("scrape lacks %q:\n%s", line, body)
		}
	}
}

type poolStats mr.PoolStats

func (p poolStats) Stats() mr.PoolStats { return mr.PoolStats(p) }

// A pool's counters are exported as they are, under their names.
func TestCollectorPool(t *testing.T) {
	c, err := mrprom.NewCollector(nil, mrprom.Options{Pool: poolStats{
		Allocations: 10, QuickHits: 7, Frees: 9, CrossStreamFrees: 3, Waits: 2,
		Steals: 1, Growths: 4, Releases: 2, Chunks: 2,
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP streamalloc_pool_allocations_total Requests the pool served.
# TYPE streamalloc_pool_allocations_total counter
streamalloc_pool_allocations_total 10
# HELP streamalloc_pool_quick_hits_total Requests served from a stream's quick cache.
# TYPE streamalloc_pool_quick_hits_total counter
streamalloc_pool_quick_hits_total 7
# HELP streamalloc_pool_frees_total Blocks freed.
# TYPE streamalloc_pool_frees_total counter
streamalloc_pool_frees_total 9
# HELP streamalloc_pool_cross_stream_frees_total Blocks freed on another stream than their chunk's.
# TYPE streamalloc_pool_cross_stream_frees_total counter
streamalloc_pool_cross_stream_frees_total 3
# HELP streamalloc_pool_waits_total Event waits enqueued to reuse memory freed on other streams.
# TYPE streamalloc_pool_waits_total counter
streamalloc_pool_waits_total 2
# HELP streamalloc_pool_steals_total Idle chunks taken from another stream.
# TYPE streamalloc_pool_steals_total counter
streamalloc_pool_steals_total 1
# HELP streamalloc_pool_growths_total Chunks allocated from the upstream.
# TYPE streamalloc_pool_growths_total counter
streamalloc_pool_growths_total 4
# HELP streamalloc_pool_releases_total Chunks given back to the upstream.
# TYPE streamalloc_pool_releases_total counter
streamalloc_pool_releases_total 2
# HELP streamalloc_pool_chunks Chunks the pool holds now.
# TYPE streamalloc_pool_chunks gauge
streamalloc_pool_chunks 2
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// A real pool's counters reach the collector.
func TestCollectorRealPool(t *testing.T) {
	st, up, s1, _ := setup(t)
	up.fail = false
	pool, err := mr.NewPool(up, mr.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := mrprom.NewCollector(st, mrprom.Options{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pool.Allocate(4096, s1)
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Deallocate(p, 4096, s1); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP streamalloc_pool_allocations_total Requests the pool served.
# TYPE streamalloc_pool_allocations_total counter
streamalloc_pool_allocations_total 1
# HELP streamalloc_pool_growths_total Chunks allocated from the upstream.
# TYPE streamalloc_pool_growths_total counter
streamalloc_pool_growths_total 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"streamalloc_pool_allocations_total", "streamalloc_pool_growths_total"); err != nil {
		t.Fatal(err)
	}
}

func TestCollectorNeedsSomething(t *testing.T) {
	if _, err := mrprom.NewCollector(nil, mrprom.Options{}); err == nil {
		t.Fatal("a collector of nothing was made")
	}
	c, err := mrprom.NewCollector(nil, mrprom.Options{Usage: usage{mr.Usage{Reserved: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c); n != 4 {
		t.Fatalf("usage-only collector exported %d metrics", n)
	}
}

func ExampleNewCollector() {
	dev := &device{}
	st := mr.NewStats(&resource{dev: dev}, mr.StatsOptions{})
	st.Allocate(4096, &stream{id: 1, dev: dev})

	c, _ := mrprom.NewCollector(st, mrprom.Options{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	// Serve it: http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "streamalloc_live_bytes" {
			fmt.Println(mf.GetName(), mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	// Output: streamalloc_live_bytes 4096
}
