package mr_test

// Tests every adaptor against the same bad input, over a recording
// upstream: each bad call gets its typed error, changes none of the
// adaptor's counters, and never reaches the upstream.

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// adaptorCase builds one adaptor over an upstream and describes its
// observable state, so tests can check that bad input changes nothing.
type adaptorCase struct {
	name  string
	wrap  func(t testing.TB, up mr.Resource) mr.Resource
	state func(a mr.Resource) string
}

func adaptorCases() []adaptorCase {
	return []adaptorCase{
		{"stats",
			func(t testing.TB, up mr.Resource) mr.Resource {
				return mr.NewStats(up, mr.StatsOptions{PerStream: true})
			},
			func(a mr.Resource) string {
				s := a.(*mr.Stats)
				return fmt.Sprint(s.Snapshot(), s.StreamSnapshots())
			}},
		{"tracking",
			func(t testing.TB, up mr.Resource) mr.Resource { return mr.NewTracking(up, mr.TrackingOptions{}) },
			func(a mr.Resource) string {
				tr := a.(*mr.Tracking)
				var b bytes.Buffer
				for _, l := range tr.Live() {
					fmt.Fprint(&b, l.Ptr, l.Size, l.Stream, l.Seq)
				}
				for _, s := range tr.Profile().Sample {
					fmt.Fprint(&b, s.Value)
				}
				return b.String()
			}},
		{"logging",
			func(t testing.TB, up mr.Resource) mr.Resource {
				buf := new(syncBuffer)
				l := mr.NewLogging(up, buf, mr.LoggingOptions{Thread: 7})
				logBuffers.Store(l, buf)
				return l
			},
			func(a mr.Resource) string {
				// The log itself: bad input must not add a line.
				l := a.(*mr.Logging)
				if err := l.Flush(); err != nil {
					return err.Error()
				}
				buf, _ := logBuffers.Load(l)
				return buf.(*syncBuffer).String()
			}},
		{"limit",
			func(t testing.TB, up mr.Resource) mr.Resource { return mr.NewLimit(up, mr.NewBudget(1<<30)) },
			func(a mr.Resource) string {
				l := a.(*mr.Limit)
				return fmt.Sprint(l.Used(), l.Budget().Used(), l.Budget().Peak())
			}},
		{"retry",
			func(t testing.TB, up mr.Resource) mr.Resource { return mr.NewRetry(up, mr.RetryOptions{}) },
			func(a mr.Resource) string { return fmt.Sprint(a.(*mr.Retry).Counts()) }},
		{"history",
			func(t testing.TB, up mr.Resource) mr.Resource { return mr.NewHistory(up, mr.HistoryOptions{}) },
			func(a mr.Resource) string {
				h := a.(*mr.History)
				var b bytes.Buffer
				fmt.Fprint(&b, h.Stats())
				for _, e := range h.Events() {
					fmt.Fprint(&b, e.Action, e.Addr, e.Size, e.Stream)
				}
				return b.String()
			}},
		{"aligned",
			func(t testing.TB, up mr.Resource) mr.Resource {
				a, err := mr.NewAligned(up, 4096)
				if err != nil {
					t.Fatal(err)
				}
				return a
			},
			func(a mr.Resource) string { return a.(*mr.Aligned).String() }},
	}
}

// logBuffers maps each Logging adaptor that adaptorCases made to its log,
// so that its state is the log's text.
var logBuffers sync.Map // *mr.Logging -> *syncBuffer

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestAdaptorsBadInput(t *testing.T) {
	for _, ac := range adaptorCases() {
		t.Run(ac.name, func(t *testing.T) {
			up := newRecording()
			a := ac.wrap(t, up)
			s := up.stream()
			other := newFakeStream(&fakeDevice{}) // another device's stream
			p, err := a.Allocate(1000, s)
			if err != nil {
				t.Fatal(err)
			}
			// Memory the upstream handed out around the adaptor: live
			// below, never seen by the adaptor.
			around, err := up.Allocate(1000, s)
			if err != nil {
				t.Fatal(err)
			}
			before, calls := ac.state(a), up.numCalls()
			upLive := up.liveBytes()

			bad := []struct {
				name string
				op   func() error
				want error
			}{
				{"free unknown pointer", func() error { return a.Deallocate(p+1<<30, 1000, s) }, mr.ErrUnknownPointer},
				{"free upstream's pointer the adaptor never saw", func() error { return a.Deallocate(around, 1000, s) }, mr.ErrUnknownPointer},
				{"free inside allocation", func() error { return a.Deallocate(p+256, 1000, s) }, mr.ErrUnknownPointer},
				{"free wrong size", func() error { return a.Deallocate(p, 999, s) }, mr.ErrSizeMismatch},
				{"free negative size", func() error { return a.Deallocate(p, -1, s) }, mr.ErrInvalidSize},
				{"free nil stream", func() error { return a.Deallocate(p, 1000, nil) }, gpu.ErrInvalidHandle},
				{"free other device's stream", func() error { return a.Deallocate(p, 1000, other) }, gpu.ErrWrongDevice},
				{"free null with size", func() error { return a.Deallocate(0, 8, s) }, mr.ErrSizeMismatch},
				{"allocate negative", func() error { _, err := a.Allocate(-1, s); return err }, mr.ErrInvalidSize},
				{"allocate nil stream", func() error { _, err := a.Allocate(8, nil); return err }, gpu.ErrInvalidHandle},
				{"allocate other device's stream", func() error { _, err := a.Allocate(8, other); return err }, gpu.ErrWrongDevice},
			}
			for _, b := range bad {
				err := b.op()
				if !errors.Is(err, b.want) {
					t.Errorf("%s: got %v, want %v", b.name, err, b.want)
				}
				if got := ac.state(a); got != before {
					t.Errorf("%s changed the adaptor's state:\n%s\nwas\n%s", b.name, got, before)
				}
				if up.numCalls() != calls {
					t.Errorf("%s reached the upstream: %+v", b.name, up.Calls()[calls:])
				}
			}

			// Size 0 is the null allocation, touching nothing.
			if q, err := a.Allocate(0, s); q != 0 || err != nil {
				t.Errorf("Allocate(0) = %#x, %v", q, err)
			}
			if err := a.Deallocate(0, 0, s); err != nil {
				t.Errorf("Deallocate(0, 0) = %v", err)
			}
			if ac.state(a) != before || up.numCalls() != calls {
				t.Errorf("the null allocation touched something")
			}

			// A free the upstream refuses leaves the pointer live and
			// the counters as they were.
			up.failFrees(errFake)
			if err := a.Deallocate(p, 1000, s); !errors.Is(err, errFake) {
				t.Fatalf("refused free: %v", err)
			}
			if got := ac.state(a); got != before {
				t.Errorf("refused free changed the state:\n%s\nwas\n%s", got, before)
			}
			if up.liveBytes() != upLive {
				t.Errorf("refused free changed the upstream")
			}

			// Now the real free, then a double free.
			if err := a.Deallocate(p, 1000, s); err != nil {
				t.Fatal(err)
			}
			calls = up.numCalls()
			after := ac.state(a)
			if err := a.Deallocate(p, 1000, s); !errors.Is(err, mr.ErrDoubleFree) {
				t.Errorf("double free: got %v, want ErrDoubleFree", err)
			}
			if up.numCalls() != calls || ac.state(a) != after {
				t.Errorf("double free reached the upstream or changed the state")
			}
			if err := up.Deallocate(around, 1000, s); err != nil {
				t.Errorf("the upstream's own allocation: %v", err)
			}
			if up.liveCount() != 0 {
				t.Errorf("upstream still holds %d allocations", up.liveCount())
			}
		})
	}
}

// TestAdaptorsUpstreamAllocFailure checks that a refused allocation hands
// nothing out and leaves no live allocation behind.
func TestAdaptorsUpstreamAllocFailure(t *testing.T) {
	for _, ac := range adaptorCases() {
		t.Run(ac.name, func(t *testing.T) {
			up := newRecording()
			a := ac.wrap(t, up)
			s := up.stream()
			up.failAllocs(fmt.Errorf("injected: %w", gpu.ErrLaunchFailed))
			if p, err := a.Allocate(512, s); p != 0 || !errors.Is(err, gpu.ErrLaunchFailed) {
				t.Fatalf("Allocate = %#x, %v", p, err)
			}
			// The adaptor holds nothing: the next allocation and its
			// free work, and a free of the failed request's null
			// result is the null free.
			p, err := a.Allocate(512, s)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Deallocate(p, 512, s); err != nil {
				t.Fatal(err)
			}
			if up.liveCount() != 0 {
				t.Fatalf("upstream holds %d allocations", up.liveCount())
			}
		})
	}
}

// TestAdaptorsConcurrent stacks every adaptor over one upstream and hammers
// the stack from many goroutines on several streams; at the end everything
// is freed and every adaptor agrees.
func TestAdaptorsConcurrent(t *testing.T) {
	up := newRecording()
	var stack mr.Resource = up
	cases := adaptorCases()
	var layers []mr.Resource
	for _, ac := range cases {
		stack = ac.wrap(t, stack)
		layers = append(layers, stack)
	}
	streams := []*fakeStream{up.stream(), up.stream(), up.stream()}
	const goroutines = 8
	n := 300
	if testing.Short() {
		n = 50
	}
	var wg sync.WaitGroup
	errc := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			type al struct {
				p    gpu.DevicePtr
				size int
				s    gpu.Stream
			}
			var mine []al
			for i := range n {
				s := streams[(g+i)%len(streams)]
				size := 1 + (g*7919+i*104729)%5000
				p, err := stack.Allocate(size, s)
				if err != nil {
					errc <- err
					return
				}
				mine = append(mine, al{p, size, s})
				if i%3 == 2 {
					x := mine[0]
					mine = mine[1:]
					// Free on another stream now and then.
					if err := stack.Deallocate(x.p, x.size, streams[i%len(streams)]); err != nil {
						errc <- err
						return
					}
				}
			}
			for _, x := range mine {
				if err := stack.Deallocate(x.p, x.size, x.s); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if up.liveCount() != 0 {
		t.Fatalf("upstream holds %d allocations", up.liveCount())
	}
	// layers: stats, tracking, logging, limit, retry, aligned (stats is
	// innermost).
	st := layers[0].(*mr.Stats).Snapshot()
	if st.Bytes.Current != 0 || st.Allocations.Current != 0 || st.Allocations.Total != goroutines*uint64(n) {
		t.Errorf("stats after the run: %+v", st)
	}
	if live := layers[1].(*mr.Tracking).Live(); len(live) != 0 {
		t.Errorf("tracking holds %d allocations", len(live))
	}
	if l := layers[3].(*mr.Limit); l.Used() != 0 || l.Budget().Used() != 0 {
		t.Errorf("limit holds %d bytes, budget %d", l.Used(), l.Budget().Used())
	}
	if err := layers[2].(*mr.Logging).Flush(); err != nil {
		t.Error(err)
	}
}
