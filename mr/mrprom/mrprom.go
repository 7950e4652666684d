// Package mrprom exports the statistics of streamalloc memory resources to
// Prometheus.
//
// A Collector reads an mr.Stats adaptor (current, peak and total bytes and
// allocations, failures, and the same per stream when the adaptor keeps
// them) and, optionally, any mr.UsageReporter (reserved and used bytes
// with their peaks) and a pool's counters (mr.Pool.Stats) each time the
// registry is scraped. It keeps no state of
// its own, so the numbers are exactly the adaptor's at scrape time, and
// scraping costs nothing between scrapes.
//
// It lives apart from package mr so that mr does not depend on the
// Prometheus client.
//
// Metric names, with the default namespace "streamalloc":
//
//	streamalloc_live_bytes                 gauge    bytes handed out now
//	streamalloc_live_bytes_peak            gauge    high-water mark of that
//	streamalloc_allocated_bytes_total      counter  bytes ever handed out
//	streamalloc_live_allocations           gauge    allocations live now
//	streamalloc_live_allocations_peak      gauge    high-water mark of that
//	streamalloc_allocations_total          counter  allocations ever made
//	streamalloc_allocation_failures_total  counter  allocations refused
//	streamalloc_out_of_memory_total        counter  of those, for lack of memory
//	streamalloc_stream_*{stream="ID"}      the same per stream (PerStream adaptors)
//	streamalloc_reserved_bytes{,_peak}     gauge    from the UsageReporter
//	streamalloc_used_bytes{,_peak}         gauge    from the UsageReporter
//	streamalloc_pool_*_total               counter  from mr.Pool.Stats: allocations,
//	                                                quick_hits, frees, cross_stream_frees,
//	                                                waits, steals, growths, releases
//	streamalloc_pool_chunks                gauge    chunks the pool holds now
//
// No gauge is named like a counter without its _total suffix (the live
// bytes are not "allocated_bytes"): OpenMetrics names a counter's family
// without the suffix, and two families of one name are an invalid
// exposition.
//
// To export several resources into one registry, give each collector
// ConstLabels that tell them apart (for example device and resource).
// ForChain builds the collector of a whole stack in one call: it finds
// the Stats adaptor, the resource whose usage to export and the Pool in the
// stack, and labels every metric with the device's ordinal.
package mrprom

import (
	"errors"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/streamalloc/streamalloc/mr"
)

// Options configure a Collector.
type Options struct {
	// Namespace prefixes every metric name; "" means "streamalloc".
	Namespace string
	// ConstLabels are added to every metric.
	ConstLabels prometheus.Labels
	// Usage, if set, is exported as reserved and used bytes. A Stats
	// adaptor is itself a UsageReporter; pass the pool or the async
	// resource below it to export what it reserved from the device.
	Usage mr.UsageReporter
	// Pool, if set (an *mr.Pool), is exported as the pool's counters:
	// how it served requests and what its slow paths did.
	Pool PoolStatser
}

// PoolStatser is what Options.Pool needs: *mr.Pool implements it.
type PoolStatser interface {
	Stats() mr.PoolStats
}

// metric is one exported value: how to read it from a snapshot S (an
// mr.StatsSnapshot or mr.PoolStats).
type metric[S any] struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
	get  func(S) uint64
}

// Collector is a prometheus.Collector over an mr.Stats adaptor and an
// optional mr.UsageReporter. It is safe for concurrent use.
type Collector struct {
	stats     *mr.Stats
	usage     mr.UsageReporter
	pool      PoolStatser
	all       []metric[mr.StatsSnapshot]
	perStream []metric[mr.StatsSnapshot]
	usageDesc [4]*prometheus.Desc
	poolDesc  []metric[mr.PoolStats]
}

// NewCollector returns a collector of stats (may be nil), opts.Usage and
// opts.Pool (each may be nil); with none of them it returns an error.
func NewCollector(stats *mr.Stats, opts Options) (*Collector, error) {
	if stats == nil && opts.Usage == nil && opts.Pool == nil {
		return nil, errors.New("mrprom: nothing to collect: no Stats, Usage or Pool")
	}
	ns := opts.Namespace
	if ns == "" {
		ns = "streamalloc"
	}
	c := &Collector{stats: stats, usage: opts.Usage, pool: opts.Pool}
	newDesc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, labels, opts.ConstLabels)
	}
	type def struct {
		name, help string
		kind       prometheus.ValueType
		get        func(mr.StatsSnapshot) uint64
	}
	defs := []def{
		{"live_bytes", "Bytes handed out and not freed.", prometheus.GaugeValue,
			func(s mr.StatsSnapshot) uint64 { return s.Bytes.Current }},
		{"live_bytes_peak", "High-water mark of the bytes handed out.", prometheus.GaugeValue,
			func(s mr.StatsSnapshot) uint64 { return s.Bytes.Peak }},
		{"allocated_bytes_total", "Bytes ever handed out.", prometheus.CounterValue,
			func(s mr.StatsSnapshot) uint64 { return s.Bytes.Total }},
		{"live_allocations", "Allocations handed out and not freed.", prometheus.GaugeValue,
			func(s mr.StatsSnapshot) uint64 { return s.Allocations.Current }},
		{"live_allocations_peak", "High-water mark of the live allocations.", prometheus.GaugeValue,
			func(s mr.StatsSnapshot) uint64 { return s.Allocations.Peak }},
		{"allocations_total", "Allocations ever made.", prometheus.CounterValue,
			func(s mr.StatsSnapshot) uint64 { return s.Allocations.Total }},
		{"allocation_failures_total", "Allocations the upstream refused.", prometheus.CounterValue,
			func(s mr.StatsSnapshot) uint64 { return s.Failures }},
		{"out_of_memory_total", "Allocations refused for lack of memory.", prometheus.CounterValue,
			func(s mr.StatsSnapshot) uint64 { return s.OutOfMemory }},
	}
	if stats != nil {
		for _, d := range defs {
			c.all = append(c.all, metric[mr.StatsSnapshot]{newDesc(d.name, d.help), d.kind, d.get})
			c.perStream = append(c.perStream, metric[mr.StatsSnapshot]{
				newDesc("stream_"+d.name, d.help+" Per allocating stream.", "stream"), d.kind, d.get})
		}
	}
	if opts.Usage != nil {
		c.usageDesc = [4]*prometheus.Desc{
			newDesc("reserved_bytes", "Bytes the resource holds from its upstream or the driver."),
			newDesc("reserved_bytes_peak", "High-water mark of the reserved bytes."),
			newDesc("used_bytes", "Bytes of the reserved ones handed out."),
			newDesc("used_bytes_peak", "High-water mark of the used bytes."),
		}
	}
	if opts.Pool != nil {
		counter := func(name, help string, get func(mr.PoolStats) uint64) metric[mr.PoolStats] {
			return metric[mr.PoolStats]{newDesc("pool_"+name, help), prometheus.CounterValue, get}
		}
		c.poolDesc = []metric[mr.PoolStats]{
			counter("allocations_total", "Requests the pool served.",
				func(s mr.PoolStats) uint64 { return s.Allocations }),
			counter("quick_hits_total", "Requests served from a stream's quick cache.",
				func(s mr.PoolStats) uint64 { return s.QuickHits }),
			counter("frees_total", "Blocks freed.",
				func(s mr.PoolStats) uint64 { return s.Frees }),
			counter("cross_stream_frees_total", "Blocks freed on another stream than their chunk's.",
				func(s mr.PoolStats) uint64 { return s.CrossStreamFrees }),
			counter("waits_total", "Event waits enqueued to reuse memory freed on other streams.",
				func(s mr.PoolStats) uint64 { return s.Waits }),
			counter("steals_total", "Idle chunks taken from another stream.",
				func(s mr.PoolStats) uint64 { return s.Steals }),
			counter("growths_total", "Chunks allocated from the upstream.",
				func(s mr.PoolStats) uint64 { return s.Growths }),
			counter("releases_total", "Chunks given back to the upstream.",
				func(s mr.PoolStats) uint64 { return s.Releases }),
			{newDesc("pool_chunks", "Chunks the pool holds now."), prometheus.GaugeValue,
				func(s mr.PoolStats) uint64 { return uint64(s.Chunks) }},
		}
	}
	return c, nil
}

// Describe sends the descriptors of every metric the collector can
// export.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.all {
		ch <- m.desc
	}
	for _, m := range c.perStream {
		ch <- m.desc
	}
	if c.usage != nil {
		for _, d := range c.usageDesc {
			ch <- d
		}
	}
	for _, m := range c.poolDesc {
		ch <- m.desc
	}
}

// Collect reads the adaptor and the usage reporter and sends their values.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.stats != nil {
		snap := c.stats.Snapshot()
		for _, m := range c.all {
			ch <- prometheus.MustNewConstMetric(m.desc, m.kind, float64(m.get(snap)))
		}
		streams := c.stats.StreamSnapshots()
		ids := make([]uint64, 0, len(streams))
		for id := range streams {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			label := strconv.FormatUint(id, 10)
			for _, m := range c.perStream {
				ch <- prometheus.MustNewConstMetric(m.desc, m.kind, float64(m.get(streams[id])), label)
			}
		}
	}
	if c.usage != nil {
		u := c.usage.Usage()
		for i, v := range [4]uint64{u.Reserved, u.PeakReserved, u.Used, u.PeakUsed} {
			ch <- prometheus.MustNewConstMetric(c.usageDesc[i], prometheus.GaugeValue, float64(v))
		}
	}
	if c.pool != nil {
		s := c.pool.Stats()
		for _, m := range c.poolDesc {
			ch <- prometheus.MustNewConstMetric(m.desc, m.kind, float64(m.get(s)))
		}
	}
}
