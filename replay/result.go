// Results and options of a replay.
//
// A Result is what `streamalloc replay --json` prints, one object per trace
// and resource. The JSON names of the first ten fields are fixed by the
// command's documented schema (trace, resource, device, events,
// allocations, peak_live_bytes, peak_reserved_bytes, fragmentation,
// ns_per_event, failures); fields may be added, none renamed.

package replay

import (
	"errors"
	"time"

	"github.com/streamalloc/streamalloc/mr"
)

// Options tune a replay. The zero value replays with no series and no
// progress reports.
type Options struct {
	// Resource and Device name the resource and the device in the
	// Result. Empty: the resource's Go type and the device's name.
	Resource string
	Device   string
	// SeriesPoints bounds Result.Series; 0 records no series. Each point
	// covers a run of consecutive events and holds their maxima, so a
	// downsampled chart still shows every peak. Values below 2 are
	// raised to 2, odd values to the next even one.
	SeriesPoints int
	// Progress, if set, is called from Run's goroutine every
	// ProgressEvery events (default 1<<16) and once more when the trace
	// has been read, with Final set.
	Progress      func(Progress)
	ProgressEvery int
	// Timeline, if set, records Result.Timeline: every block's life, the
	// reserved bytes at every change and the resource's segments over
	// time. It costs about 60 bytes per allocation and 8 per event, for
	// at most TimelineEvents events (0: DefaultTimelineEvents).
	Timeline       bool
	TimelineEvents int
	// Upstream, if set, is the timer between the replayed resource (a
	// suballocator) and its upstream: the time spent in the upstream's
	// calls is reported apart (Result.UpstreamNsPerEvent) and not counted
	// as the resource's own (Result.OwnNsPerEvent). The resource's
	// usage (mr.UsageReporter) is then read only after events in which
	// it called the upstream, since a suballocator's reserved bytes
	// change only through it.
	Upstream *UpstreamTimer
	// Timed replays the trace in its own time (timed.go): the host waits
	// for each event's time, and the time between two events of a stream
	// is enqueued on it as a kernel of that length, so that frees
	// complete when they would have. TimeScale multiplies every duration
	// (0: 1; 0.1 replays ten times faster, with ten times shorter
	// kernels); it must not be negative.
	Timed     bool
	TimeScale float64
	// TimedMinKernel is the shortest gap a timed replay enqueues as a
	// kernel; shorter gaps of a stream add up until they reach it. 0:
	// DefaultTimedMinKernel on a card, DefaultSimTimedMinKernel on the
	// simulator. Negative is an error matching ErrTimeScale.
	TimedMinKernel time.Duration
}

// ErrTimeScale is the error, wrapped, of a negative or NaN
// Options.TimeScale, or a negative Options.TimedMinKernel.
var ErrTimeScale = errors.New("replay: bad time scale")

// Progress is a report of how far a replay is.
type Progress struct {
	Events int64 // events replayed so far
	// Done out of Total units of the trace, if its reader knows them
	// (trace.Progresser: bytes of the file, or events of a snapshot);
	// Total is 0 when unknown.
	Done, Total int64
	Final       bool
}

// Fraction is Done/Total, or -1 when Total is unknown.
func (p Progress) Fraction() float64 {
	if p.Total <= 0 {
		return -1
	}
	f := float64(p.Done) / float64(p.Total)
	return min(f, 1)
}

// Sample is one point of Result.Series: the largest live and reserved
// byte counts over the events up to and including Event (the index of
// the last event the point covers, counted from 0) since the previous
// point. Time is the trace's time of that last event (trace.Event.Time).
type Sample struct {
	Event    int64         `json:"event"`
	Live     uint64        `json:"live"`
	Reserved uint64        `json:"reserved"`
	Time     time.Duration `json:"time_ns"`
}

// Result is what one replay of one trace against one resource measured.
type Result struct {
	Trace    string `json:"trace"`
	Resource string `json:"resource"`
	Device   string `json:"device"`
	// Events is the number of events read from the trace (allocations,
	// recorded failures and frees).
	Events int64 `json:"events"`
	// Allocations is the number of allocation events of the trace,
	// whether or not the replayed resource granted them.
	Allocations int64 `json:"allocations"`
	// PeakLiveBytes is the largest sum of the trace's own sizes of the
	// blocks live at once. It is a property of the trace, the same for
	// every resource: an allocation the replay failed still counts as
	// live until the trace frees it.
	PeakLiveBytes uint64 `json:"peak_live_bytes"`
	// PeakReservedBytes is the largest Reserved the resource reported
	// (mr.UsageReporter: the first resource of its adaptor chain, mr.Chain,
	// that reports usage) after any event, or its own high-water mark if
	// it was fresh when the replay began. For a stack where nothing
	// reports usage it is the peak of bytes the replay held.
	PeakReservedBytes uint64 `json:"peak_reserved_bytes"`
	// Fragmentation is PeakReservedBytes / PeakLiveBytes (0 if nothing
	// was live).
	Fragmentation float64 `json:"fragmentation"`
	// NsPerEvent is the host time spent in the resource's Allocate and
	// Deallocate calls divided by the number of those calls (trace
	// parsing and bookkeeping excluded), its upstream's calls included.
	NsPerEvent float64 `json:"ns_per_event"`
	// Failures counts allocations the replayed resource refused with
	// mr.ErrOutOfMemory.
	Failures int64 `json:"failures"`

	// Frees is the number of free events of the trace.
	Frees int64 `json:"frees"`
	// UnknownFrees counts frees of pointers that were not live: never
	// allocated in the trace, or freed twice. They are skipped.
	UnknownFrees int64 `json:"unknown_frees"`
	// TraceFailures counts the trace's own "allocate failure" events.
	// They are not replayed (the recorded program got no memory).
	TraceFailures int64 `json:"trace_failures"`
	// DuplicateAllocations counts allocations of a pointer the trace
	// still had live (a free missing from the trace); the older block is
	// freed first, as if its free had been recorded.
	DuplicateAllocations int64 `json:"duplicate_allocations"`
	// FreedAtEnd counts blocks the trace never freed, which the replay
	// freed after the last event.
	FreedAtEnd int64 `json:"freed_at_end"`
	// Streams is the number of distinct streams of the trace.
	Streams int `json:"streams"`
	// Wall is the duration of the whole replay, trace reading included.
	Wall time.Duration `json:"wall_ns"`
	// Series is the downsampled course of live and reserved bytes, if
	// Options.SeriesPoints asked for it.
	Series []Sample `json:"series,omitempty"`
	// Simulated says whether the device is a simulated one
	// (gpu.Properties.Simulated): its timings are the simulator's.
	Simulated bool `json:"simulated"`
	// Upstream names the upstream that Options.Upstream timed ("" if
	// none was given). UpstreamCalls is how many calls the resource made
	// to it during its timed Allocate and Deallocate calls, and
	// UpstreamNsPerEvent the time spent in them divided by the
	// resource's calls (as NsPerEvent). OwnNsPerEvent is NsPerEvent less
	// UpstreamNsPerEvent: what the resource itself costs.
	Upstream           string  `json:"upstream,omitempty"`
	UpstreamCalls      int64   `json:"upstream_calls"`
	UpstreamNsPerEvent float64 `json:"upstream_ns_per_event"`
	OwnNsPerEvent      float64 `json:"own_ns_per_event"`
	// PeakUpstreamReservedBytes is the largest Reserved the upstream
	// reported (UpstreamTimer.PeakReserved): the device memory held
	// behind the resource, which for a driver pool is more than the
	// resource reserved from it. 0 without Options.Upstream or when the
	// upstream reports no usage.
	PeakUpstreamReservedBytes uint64 `json:"peak_upstream_reserved_bytes,omitempty"`
	// Timed says the replay kept the trace's time (Options.Timed).
	// TimedKernels and TimedWork are the kernels it enqueued for the
	// gaps and their total length (scaled); TimedBehind is the most the
	// host fell behind the trace's schedule, against which the timed
	// figures should be read.
	Timed        bool          `json:"timed,omitempty"`
	TimedKernels int64         `json:"timed_kernels,omitempty"`
	TimedWork    time.Duration `json:"timed_work_ns,omitempty"`
	TimedBehind  time.Duration `json:"timed_behind_ns,omitempty"`
	// Pool is how the replayed resource served the trace, when it is a
	// Pool (or exposes one's counters: a method Stats() mr.PoolStats),
	// read after the replay freed what the trace left live and released
	// what the pool caches: how many allocations its quick cache served,
	// its growths, steals and decommits. Nil for any other resource.
	Pool *mr.PoolStats `json:"pool,omitempty"`
	// Timeline is the event-by-event record, if Options.Timeline asked
	// for it. It is not part of the JSON: a report embeds it in its own
	// form.
	Timeline *Timeline `json:"-"`
}

// GroupByTrace splits xs by the trace each belongs to (trace(x), a
// Result's Trace), groups in the order of each trace's first element,
// elements in their order. Reports and tables of several replays show one
// section a trace this way.
func GroupByTrace[T any](xs []T, trace func(T) string) [][]T {
	var groups [][]T
	index := map[string]int{}
	for _, x := range xs {
		name := trace(x)
		i, ok := index[name]
		if !ok {
			i = len(groups)
			index[name] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], x)
	}
	return groups
}
