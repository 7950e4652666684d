// The statistics of a chain of resources in one call, and the summary a
// person reads: what PyTorch's memory_stats and memory_summary are for its
// caching allocator, for any stack of our resources and adaptors.
//
// StatsOf walks the chain from the resource given down to the device
// (through the adaptors' upstreams, and through the suballocators, Pool,
// Arena, FixedSize and Binning, to what they carve from) and reads, at
// each level, every statistic the resource keeps: Usage, a Stats
// adaptor's counters (per stream too), a Pool's counters and layout, the
// pending frees of an Async, a Retry's counts, a Limit's budget, what a
// Tracking adaptor holds, a HostPool's counters. WriteSummary prints it,
// sizes in IEC units. A stack over a host pool (host.go) reads the same
// way; its device is the one whose context the memory is registered with,
// whose Total and Free are device memory, for the reader's orientation.
//
// Invariants: reading statistics changes nothing and frees nothing; each
// level is read once, nearest first, so under concurrent use the levels
// are consistent one by one but may be a moment apart. Nothing is read
// from the device while a capture of it runs (MemGetInfo is not allowed
// then in global mode), and Async reads its pool relaxed (async.go).

package mr

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/streamalloc/streamalloc/gpu"
)

// ChainStats is every statistic of a chain of resources, read at one call
// of StatsOf.
type ChainStats struct {
	Device DeviceMemory
	// Levels has one entry per resource, nearest first: the resource
	// given to StatsOf, its upstream, and so on down to the device.
	Levels []LevelStats
}

// DeviceMemory describes the device a chain allocates on.
type DeviceMemory struct {
	Ordinal   int
	Name      string
	Simulated bool
	// Total and Free are cuMemGetInfo's answer, or 0 if the device could
	// not be asked (a capture of it runs, or the call failed).
	Total, Free uint64
}

// LevelStats is what one resource of a chain reports. Each pointer is
// nil when the resource does not keep that statistic.
type LevelStats struct {
	// Name is the resource's kind ("pool", "stats", "async"...), or its
	// Go type for a resource of another package.
	Name     string
	Resource Resource
	// Usage: every UsageReporter.
	Usage *Usage
	// Stats and Streams: a Stats adaptor, per stream if it keeps them
	// (ordered by stream ID).
	Stats   *StatsSnapshot
	Streams []StreamStats
	// Pool and Layout: a Pool's counters and its chunks and blocks.
	Pool   *PoolStats
	Layout *PoolLayout
	// Pending: the pending-free accounting of an Async.
	Pending *PendingStats
	// Retry: a Retry adaptor's counts.
	Retry *RetryCounts
	// Budget: a Limit adaptor's shared budget and its own share.
	Budget *BudgetStats
	// Tracked: what a Tracking adaptor holds.
	Tracked *TrackedStats
	// History: what a History adaptor recorded.
	History *HistoryStats
	// Host: a HostPool's counters.
	Host *HostPoolStats
}

// StreamStats is a Stats adaptor's counters of one stream.
type StreamStats struct {
	Stream uint64
	StatsSnapshot
}

// PendingStats is the pending-free accounting of a resource.
type PendingStats struct {
	LiveBytes, PendingBytes       uint64
	LiveAllocations, PendingFrees uint64
	Streams                       []StreamPending
}

// BudgetStats is a Limit adaptor's view of its budget.
type BudgetStats struct {
	Limit, Used, Peak uint64 // the shared budget
	Charged           uint64 // what this adaptor charged to it and holds
}

// TrackedStats is what a Tracking adaptor holds.
type TrackedStats struct {
	Live      int    // live allocations
	LiveBytes uint64 // their bytes
	CallSites int    // distinct call stacks that allocated, ever
}

// summaryUpstream is implemented by the suballocators of this package,
// which carve their memory from an upstream without being Wrappers (Chain
// and Reclaim stop at them; Walk goes on to show what they hold).
type summaryUpstream interface{ summaryUpstream() Resource }

func (p *Pool) summaryUpstream() Resource      { return p.upstream }
func (r *Arena) summaryUpstream() Resource     { return r.up }
func (r *FixedSize) summaryUpstream() Resource { return r.up }
func (r *Binning) summaryUpstream() Resource   { return r.up }

// Walk returns r and every resource below it, nearest first, as Chain
// does, but goes on through the suballocators of this package (Pool,
// Arena, FixedSize, Binning) to the upstream they carve their memory from:
// the whole stack down to the device, as StatsOf and the summary read it.
// Chain and Reclaim stop at the suballocators. Walk stops after 64
// resources, so a stack that loops cannot hang it.
func Walk(r Resource) []Resource {
	var out []Resource
	for r != nil && len(out) < maxChain {
		out = append(out, r)
		switch w := r.(type) {
		case Wrapper:
			r = w.Upstream()
		case summaryUpstream:
			r = w.summaryUpstream()
		default:
			r = nil
		}
	}
	return out
}

// resourceName is the kind of r as the summary names it.
func resourceName(r Resource) string {
	switch r := r.(type) {
	case *Pool:
		return "pool"
	case *Async:
		return "async"
	case *Direct:
		return "direct"
	case *Managed:
		return "managed"
	case *Arena:
		return "arena"
	case *Binning:
		return "binning"
	case *FixedSize:
		return r.name
	case *Stats:
		return "stats"
	case *Tracking:
		return "tracking"
	case *Logging:
		return "logging"
	case *Limit:
		return "limit"
	case *Retry:
		return "retry"
	case *Aligned:
		return "aligned"
	case *History:
		return "history"
	case *HostPool:
		return "host pool"
	case *DriverHostPool:
		return "driver host pool"
	}
	return fmt.Sprintf("%T", r)
}

// deviceMemoryOf names dev and reads its free and total memory, except
// while a capture is active on it (a global-mode capture forbids the
// query, cuMemGetInfo, as a potentially unsafe call); a nil dev is the
// zero value.
func deviceMemoryOf(dev gpu.Device) DeviceMemory {
	if dev == nil {
		return DeviceMemory{}
	}
	p := dev.Properties()
	m := DeviceMemory{Ordinal: dev.Ordinal(), Name: p.Name, Simulated: p.Simulated}
	if !gpu.DeviceCapturing(dev) {
		if free, total, err := dev.MemGetInfo(); err == nil {
			m.Total, m.Free = total, free
		}
	}
	return m
}

// StatsOf reads every statistic of r's chain (the file comment says
// which). A nil r has none: the result is empty.
func StatsOf(r Resource) ChainStats {
	var cs ChainStats
	if r == nil {
		return cs
	}
	cs.Device = deviceMemoryOf(r.Device())
	for _, res := range Walk(r) {
		cs.Levels = append(cs.Levels, levelOf(res))
	}
	return cs
}

func levelOf(r Resource) LevelStats {
	l := LevelStats{Name: resourceName(r), Resource: r}
	if ur, ok := r.(UsageReporter); ok {
		u := ur.Usage()
		l.Usage = &u
	}
	switch r := r.(type) {
	case *Stats:
		s := r.Snapshot()
		l.Stats = &s
		for id, ss := range r.StreamSnapshots() {
			l.Streams = append(l.Streams, StreamStats{Stream: id, StatsSnapshot: ss})
		}
		slices.SortFunc(l.Streams, func(a, b StreamStats) int {
			return compareUint64(a.Stream, b.Stream)
		})
	case *Pool:
		ps := r.Stats()
		lay := r.Layout()
		l.Pool, l.Layout = &ps, &lay
	case *Async:
		l.Pending = pendingStats(r.Pending())
	case *Retry:
		c := r.Counts()
		l.Retry = &c
	case *Limit:
		b := r.Budget()
		l.Budget = &BudgetStats{Limit: b.Limit(), Used: b.Used(), Peak: b.Peak(), Charged: r.Used()}
	case *Tracking:
		l.Tracked = r.tracked()
	case *History:
		h := r.Stats()
		l.History = &h
	case *HostPool:
		st := r.Stats()
		l.Host = &st
	}
	return l
}

func pendingStats(p *PendingFrees) *PendingStats {
	if p == nil {
		return nil
	}
	lb, pb, la, pf := p.Counts()
	return &PendingStats{LiveBytes: lb, PendingBytes: pb, LiveAllocations: la, PendingFrees: pf,
		Streams: p.Streams()}
}

func compareUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Summary returns WriteSummary's text for r.
func Summary(r Resource) string {
	var b strings.Builder
	StatsOf(r).WriteSummary(&b)
	return b.String()
}

// WriteSummary writes a summary of r's chain to w: the device, then each
// resource, nearest first, with what it reserved and handed out (current
// and peak), its counts, out-of-memory refusals, its streams where it
// keeps statistics per stream, and a pool's chunks and largest free block.
// It returns the first error writing to w.
func WriteSummary(w io.Writer, r Resource) error {
	return StatsOf(r).WriteSummary(w)
}

// Usage is the chain's usage as a whole: Reserved and PeakReserved are
// what the deepest resource that reports Usage holds (what the chain took
// from the device or the driver's pool), Used and PeakUsed what the
// nearest Stats adaptor counts as handed out, or else the nearest
// resource that reports Usage.
func (c ChainStats) Usage() Usage {
	var u Usage
	for i := len(c.Levels) - 1; i >= 0; i-- {
		if l := c.Levels[i]; l.Usage != nil {
			u.Reserved, u.PeakReserved = l.Usage.Reserved, l.Usage.PeakReserved
			break
		}
	}
	for _, l := range c.Levels {
		if l.Stats != nil {
			u.Used, u.PeakUsed = l.Stats.Bytes.Current, l.Stats.Bytes.Peak
			break
		}
		if l.Usage != nil {
			u.Used, u.PeakUsed = l.Usage.Used, l.Usage.PeakUsed
			break
		}
	}
	return u
}

// String is the chain and its Usage on one line: "stats > pool > direct:
// reserved 16.0 MiB (peak 16.0 MiB), used 6.0 MiB (peak 9.1 MiB)".
func (c ChainStats) String() string {
	names := make([]string, len(c.Levels))
	for i, l := range c.Levels {
		names[i] = l.Name
	}
	return strings.Join(names, " > ") + ": " + c.Usage().String()
}

// Table columns: a label of labelWidth, then value columns of colWidth.
const (
	labelWidth = 22
	colWidth   = 13
)

// WriteSummary writes the summary of c (see the function WriteSummary).
func (c ChainStats) WriteSummary(w io.Writer) error {
	bw := bufio.NewWriter(w)
	if len(c.Levels) == 0 {
		fmt.Fprintln(bw, "streamalloc memory summary: no resource")
		return bw.Flush()
	}
	d := c.Device
	fmt.Fprintf(bw, "streamalloc memory summary: device %d, %s", d.Ordinal, d.Name)
	if d.Simulated {
		bw.WriteString(" (simulated)")
	}
	if d.Total != 0 {
		fmt.Fprintf(bw, ", %s total, %s free", FormatBytes(d.Total), FormatBytes(d.Free))
	}
	bw.WriteString("\n")
	names := make([]string, len(c.Levels))
	for i, l := range c.Levels {
		names[i] = l.Name
	}
	fmt.Fprintf(bw, "chain: %s\n", strings.Join(names, " > "))
	for _, l := range c.Levels {
		bw.WriteString("\n")
		l.write(bw)
	}
	return bw.Flush()
}

// row writes a table row: an indented label and right-aligned columns.
func row(w io.Writer, label string, cols ...string) {
	fmt.Fprintf(w, "  %-*s", labelWidth, label)
	for _, c := range cols {
		fmt.Fprintf(w, "%*s", colWidth, c)
	}
	fmt.Fprintln(w)
}

func count(n uint64) string { return fmt.Sprintf("%d", n) }

func plural(n uint64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func (l LevelStats) write(w *bufio.Writer) {
	fmt.Fprintf(w, "%s\n", l.Name)
	if l.Stats != nil {
		s := l.Stats
		row(w, "", "current", "peak", "total")
		row(w, "live bytes", FormatBytes(s.Bytes.Current), FormatBytes(s.Bytes.Peak), FormatBytes(s.Bytes.Total))
		row(w, "live allocations", count(s.Allocations.Current), count(s.Allocations.Peak), count(s.Allocations.Total))
		fmt.Fprintf(w, "  refused: %s, %s\n", plural(s.Failures, "allocation", "allocations"),
			plural(s.OutOfMemory, "out of memory", "out of memory"))
		if len(l.Streams) > 0 {
			row(w, "per stream", "live bytes", "peak", "total", "allocations", "peak", "total")
		}
		for _, ss := range l.Streams {
			row(w, fmt.Sprintf("stream %d", ss.Stream),
				FormatBytes(ss.Bytes.Current), FormatBytes(ss.Bytes.Peak), FormatBytes(ss.Bytes.Total),
				count(ss.Allocations.Current), count(ss.Allocations.Peak), count(ss.Allocations.Total))
		}
		for _, ss := range l.Streams {
			if ss.Failures != 0 {
				fmt.Fprintf(w, "  stream %d refused: %s, %s\n", ss.Stream,
					plural(ss.Failures, "allocation", "allocations"),
					plural(ss.OutOfMemory, "out of memory", "out of memory"))
			}
		}
	} else if l.Usage != nil {
		u := l.Usage
		row(w, "", "current", "peak")
		row(w, "reserved", FormatBytes(u.Reserved), FormatBytes(u.PeakReserved))
		row(w, "used", FormatBytes(u.Used), FormatBytes(u.PeakUsed))
	}
	if l.Layout != nil {
		writeLayout(w, *l.Layout)
	}
	if l.Pool != nil {
		p := l.Pool
		fmt.Fprintf(w, "  served %s (%d from the quick cache), %s (%d cross-stream)\n",
			plural(p.Allocations, "allocation", "allocations"), p.QuickHits,
			plural(p.Frees, "free", "frees"), p.CrossStreamFrees)
		fmt.Fprintf(w, "  slow paths: %s, %s, %s, %s\n", plural(p.Growths, "growth", "growths"),
			plural(p.Releases, "release", "releases"), plural(p.Steals, "steal", "steals"),
			plural(p.Waits, "event wait", "event waits"))
	}
	if p := l.Pending; p != nil {
		fmt.Fprintf(w, "  live %s in %s; pending frees %s in %s\n",
			FormatBytes(p.LiveBytes), plural(p.LiveAllocations, "allocation", "allocations"),
			FormatBytes(p.PendingBytes), plural(p.PendingFrees, "free", "frees"))
		for _, sp := range p.Streams {
			fmt.Fprintf(w, "  stream %d: pending %s in %s\n", sp.Stream, FormatBytes(sp.Bytes),
				plural(sp.Frees, "free", "frees"))
		}
	}
	if r := l.Retry; r != nil {
		fmt.Fprintf(w, "  %v\n", *r)
	}
	if b := l.Budget; b != nil {
		fmt.Fprintf(w, "  budget %s: %s charged (peak %s), %s of it through this adaptor\n",
			FormatBytes(b.Limit), FormatBytes(b.Used), FormatBytes(b.Peak), FormatBytes(b.Charged))
	}
	if h := l.History; h != nil {
		fmt.Fprintf(w, "  %s recorded, %d kept (ring of %d)\n", plural(h.Recorded, "event", "events"), h.Kept, h.Capacity)
	}
	if t := l.Tracked; t != nil {
		fmt.Fprintf(w, "  %s live (%s) from %s\n", plural(uint64(t.Live), "allocation", "allocations"),
			FormatBytes(t.LiveBytes), plural(uint64(t.CallSites), "call site", "call sites"))
	}
	if h := l.Host; h != nil {
		fmt.Fprintf(w, "  %s from the cache (%d ordered by an event wait), %s, %s given back\n",
			plural(h.Hits, "request", "requests"), h.Waits, plural(h.Misses, "page-locked allocation", "page-locked allocations"),
			plural(h.Released, "block", "blocks"))
	}
}

// writeLayout writes a pool's chunks, its blocks by state, and its home
// streams.
func writeLayout(w *bufio.Writer, l PoolLayout) {
	var small, large int
	type home struct {
		chunks int
		bytes  [4]uint64
	}
	homes := map[uint64]*home{}
	var ids []uint64
	for _, c := range l.Chunks {
		if c.Small {
			small++
		} else {
			large++
		}
		h := homes[c.Stream]
		if h == nil {
			h = new(home)
			homes[c.Stream] = h
			ids = append(ids, c.Stream)
		}
		h.chunks++
		for _, b := range c.Blocks {
			h.bytes[b.State] += uint64(b.Size)
		}
	}
	fmt.Fprintf(w, "  chunks: %d (%d small, %d large), %s; largest free block %s\n",
		len(l.Chunks), small, large, FormatBytes(l.Reserved()), FormatBytes(l.LargestFree))
	fmt.Fprintf(w, "  blocks: %d live (%s), %d free (%s), %d cached (%s), %d pending (%s)\n",
		l.Blocks[BlockLive], FormatBytes(l.Bytes[BlockLive]), l.Blocks[BlockFree], FormatBytes(l.Bytes[BlockFree]),
		l.Blocks[BlockCached], FormatBytes(l.Bytes[BlockCached]), l.Blocks[BlockPending], FormatBytes(l.Bytes[BlockPending]))
	slices.Sort(ids)
	for _, id := range ids {
		h := homes[id]
		fmt.Fprintf(w, "  stream %d: %s, live %s, free %s, cached %s, pending %s\n", id,
			plural(uint64(h.chunks), "chunk", "chunks"), FormatBytes(h.bytes[BlockLive]),
			FormatBytes(h.bytes[BlockFree]), FormatBytes(h.bytes[BlockCached]), FormatBytes(h.bytes[BlockPending]))
	}
}

// tracked counts what t holds.
func (t *Tracking) tracked() *TrackedStats {
	n, bytes := t.live.count()
	ts := &TrackedStats{Live: n, LiveBytes: bytes}
	for i := range t.stacks.shards {
		sh := &t.stacks.shards[i]
		sh.mu.Lock()
		for _, r := range sh.m {
			for ; r != nil; r = r.next {
				ts.CallSites++
			}
		}
		sh.mu.Unlock()
	}
	return ts
}
