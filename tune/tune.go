// Package tune picks a memory resource and its options for a workload
// from its allocation traces, without a GPU: it replays every trace
// against every setting of a grid (grid.go) on devices that the caller
// makes (the simulator, in `streamalloc tune`), in parallel, and selects
// the setting that reserves least under a bound on host time per event,
// or the fastest under a bound on fragmentation.
//
// # What the figures mean
//
// A suballocator over mr.Direct reserves the same bytes on the simulator
// as on the card (its decisions depend only on the sequence of calls),
// so its peak reserved is exact. The driver's pool (async) is the
// simulator's model of it (gpu/sim/pool.go), whose distance from the card
// on each trace BENCHMARKS.md's fidelity table gives (within 5% on nine
// traces), for the pool's default settings only: Setting.Validated says
// which settings were checked, and ValidatedOnly keeps those. Host time
// per event is the simulator's: it ranks the suballocators, whose own
// code is most of it, but not the driver, whose calls the simulator does
// not time like the card; and replays that run at once on a busy machine
// disturb each other, so a time bound should leave a margin.
//
// # Invariants
//
// Every (setting, trace) pair is replayed exactly once, on a device of
// its own, by one of Options.Workers goroutines; the outcomes are in
// the order of the settings whatever order the replays finished in. A
// replay that fails makes its setting ineligible (Outcome.Err), never the
// run: the other settings still count. Cancelling ctx stops the run and
// returns ctx's error.
package tune

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/replay"
	"github.com/streamalloc/streamalloc/trace"
)

// ErrNoSetting is the error, wrapped, of a selection that no setting
// satisfies.
var ErrNoSetting = errors.New("tune: no setting meets the bound")

// ErrNoTrace is the error of a run given no trace, or no setting.
var ErrNoTrace = errors.New("tune: nothing to replay")

// Trace is a trace held in memory, replayed once per setting.
type Trace struct {
	Name   string
	Events []trace.Event
}

// Load reads every event of r into a Trace.
func Load(r trace.Reader) (*Trace, error) {
	t := &Trace{Name: r.Name()}
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return t, nil
		}
		if err != nil {
			return nil, fmt.Errorf("tune: load %s: %w", r.Name(), err)
		}
		t.Events = append(t.Events, ev)
	}
}

// reader yields a Trace's events (trace.Reader).
type reader struct {
	t *Trace
	i int
}

func (r *reader) Name() string { return r.t.Name }

func (r *reader) Next() (trace.Event, error) {
	if r.i == len(r.t.Events) {
		return trace.Event{}, io.EOF
	}
	r.i++
	return r.t.Events[r.i-1], nil
}

// Options configure a tuning run.
type Options struct {
	// NewDevice makes the device of one replay; it is called once per
	// replay, from the worker goroutines, so each replay has a device of
	// its own (a fresh simulator: sim.New(sim.Config{}).Device(0)).
	NewDevice func() (gpu.Device, error)
	// Workers is how many replays run at once (0: GOMAXPROCS).
	Workers int
	// Progress, if set, is called after each replay with the number done
	// and the total, from the worker that finished it (calls do not
	// overlap).
	Progress func(done, total int)
}

// TraceResult is what one setting did with one trace.
type TraceResult struct {
	Trace             string  `json:"trace"`
	PeakLiveBytes     uint64  `json:"peak_live_bytes"`
	PeakReservedBytes uint64  `json:"peak_reserved_bytes"`
	Fragmentation     float64 `json:"fragmentation"`
	NsPerEvent        float64 `json:"ns_per_event"`
	Failures          int64   `json:"failures"`
	Events            int64   `json:"events"`
}

// Outcome is what one setting did with every trace.
type Outcome struct {
	Setting Setting       `json:"setting"`
	Traces  []TraceResult `json:"traces"`
	// ReservedBytes is the sum over the traces of their peak reserved
	// bytes (each trace is a separate run of the workload).
	ReservedBytes uint64 `json:"reserved_bytes"`
	// MaxFragmentation is the largest of the traces' fragmentations.
	MaxFragmentation float64 `json:"max_fragmentation"`
	// NsPerEvent is the host time per allocation and free over every
	// trace, each trace weighted by its events.
	NsPerEvent float64 `json:"ns_per_event"`
	// Failures counts the allocations the resource refused, over every
	// trace.
	Failures int64 `json:"failures"`
	// Validated is Setting.Validated: whether the simulator's figures for
	// the setting were checked against the card.
	Validated bool `json:"validated"`
	// Err is why a replay of the setting failed; such an outcome is never
	// selected.
	Err string `json:"error,omitempty"`
}

// eligible reports whether o may be selected: every replay finished and
// no allocation was refused.
func (o *Outcome) eligible() bool { return o.Err == "" && o.Failures == 0 }

// Run replays every trace against every setting and returns the outcomes
// in the order of settings.
func Run(ctx context.Context, traces []*Trace, settings []Setting, opts Options) ([]Outcome, error) {
	if len(traces) == 0 || len(settings) == 0 {
		return nil, ErrNoTrace
	}
	if opts.NewDevice == nil {
		return nil, errors.New("tune: Options.NewDevice is nil")
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	type job struct{ s, t int }
	results := make([][]*replay.Result, len(settings))
	errs := make([][]error, len(settings))
	for i := range settings {
		results[i] = make([]*replay.Result, len(traces))
		errs[i] = make([]error, len(traces))
	}
	total := len(settings) * len(traces)
	jobs := make(chan job)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex // Progress calls and done
		done int
	)
	for range min(workers, total) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				results[j.s][j.t], errs[j.s][j.t] = replayOne(ctx, traces[j.t], settings[j.s], opts.NewDevice)
				if opts.Progress != nil {
					mu.Lock()
					done++
					opts.Progress(done, total)
					mu.Unlock()
				}
			}
		}()
	}
feed:
	for s := range settings {
		for t := range traces {
			select {
			case jobs <- job{s, t}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("tune: %w", err)
	}
	out := make([]Outcome, len(settings))
	for i, s := range settings {
		out[i] = outcome(s, results[i], errs[i])
	}
	return out, nil
}

// replayOne replays t against a fresh resource of s on a fresh device.
func replayOne(ctx context.Context, t *Trace, s Setting, newDevice func() (gpu.Device, error)) (_ *replay.Result, err error) {
	dev, err := newDevice()
	if err != nil {
		return nil, fmt.Errorf("device: %w", err)
	}
	res, closeRes, err := s.Build(dev)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := closeRes(); cerr != nil && err == nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}()
	return replay.Run(ctx, &reader{t: t}, dev, res, replay.Options{Resource: s.Resource})
}

func outcome(s Setting, rs []*replay.Result, errs []error) Outcome {
	o := Outcome{Setting: s, Validated: s.Validated()}
	var ns float64
	var events int64
	for i, r := range rs {
		if errs[i] != nil {
			o.Err = errs[i].Error()
			return o
		}
		o.Traces = append(o.Traces, TraceResult{Trace: r.Trace, PeakLiveBytes: r.PeakLiveBytes,
			PeakReservedBytes: r.PeakReservedBytes, Fragmentation: r.Fragmentation,
			NsPerEvent: r.NsPerEvent, Failures: r.Failures, Events: r.Events})
		o.ReservedBytes += r.PeakReservedBytes
		o.MaxFragmentation = max(o.MaxFragmentation, r.Fragmentation)
		o.Failures += r.Failures
		ns += r.NsPerEvent * float64(r.Events)
		events += r.Events
	}
	if events > 0 {
		o.NsPerEvent = ns / float64(events)
	}
	return o
}

// ValidatedOnly returns the outcomes of outs whose settings were checked
// against the card (Outcome.Validated), in order.
func ValidatedOnly(outs []Outcome) []Outcome {
	var v []Outcome
	for _, o := range outs {
		if o.Validated {
			v = append(v, o)
		}
	}
	return v
}

// LeastReserved returns the eligible outcome of least ReservedBytes whose
// NsPerEvent is at most maxNs (0: no bound); ties go to the earlier in
// outs (Grid lists each resource's defaults first), not to the faster:
// host times differ from run to run by more than settings that reserve
// the same bytes differ. None is an error matching ErrNoSetting.
func LeastReserved(outs []Outcome, maxNs float64) (Outcome, error) {
	best := -1
	for i := range outs {
		o := &outs[i]
		if !o.eligible() || maxNs > 0 && o.NsPerEvent > maxNs {
			continue
		}
		if best < 0 || o.ReservedBytes < outs[best].ReservedBytes {
			best = i
		}
	}
	if best < 0 {
		return Outcome{}, fmt.Errorf("%w: none of %d settings takes at most %.0f ns per event", ErrNoSetting, len(outs), maxNs)
	}
	return outs[best], nil
}

// Fastest returns the eligible outcome of least NsPerEvent whose
// fragmentation on every trace is at most maxFrag (0: no bound); ties go
// to the one that reserves less, then to the earlier in outs. None is an
// error matching ErrNoSetting.
func Fastest(outs []Outcome, maxFrag float64) (Outcome, error) {
	best := -1
	for i := range outs {
		o := &outs[i]
		if !o.eligible() || maxFrag > 0 && o.MaxFragmentation > maxFrag {
			continue
		}
		if best < 0 || o.NsPerEvent < outs[best].NsPerEvent ||
			o.NsPerEvent == outs[best].NsPerEvent && o.ReservedBytes < outs[best].ReservedBytes {
			best = i
		}
	}
	if best < 0 {
		return Outcome{}, fmt.Errorf("%w: none of %d settings keeps fragmentation at most %.3f", ErrNoSetting, len(outs), maxFrag)
	}
	return outs[best], nil
}

// Reader returns a trace.Reader of t's events, from the first.
func (t *Trace) Reader() trace.Reader { return &reader{t: t} }
