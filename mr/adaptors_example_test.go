package mr_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// Tracking remembers each live allocation with the stack that made it:
// the leak report lists them by call site, and WriteProfile writes a
// profile for `go tool pprof`.
func ExampleTracking() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()
	tr := mr.NewTracking(mr.NewDirect(dev), mr.TrackingOptions{})
	p, _ := tr.Allocate(4096, s)

	var buf bytes.Buffer
	tr.WriteLeakReport(&buf)
	lines := strings.Split(buf.String(), "\n")
	fmt.Println(lines[0])
	fmt.Println(lines[3])
	tr.Deallocate(p, 4096, s)
	// Output:
	// streamalloc: 4096 bytes live in 1 allocations from 1 call sites
	// 	github.com/streamalloc/streamalloc/mr_test.ExampleTracking
}

// Aligned serves alignments above the 256 bytes every resource gives.
func ExampleNewAligned() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()
	a, _ := mr.NewAligned(mr.NewDirect(dev), 64<<10)
	p, _ := a.Allocate(1000, s)
	fmt.Println(p%(64<<10) == 0)
	q, _ := a.AllocateAligned(1000, 2048, s)
	fmt.Println(q%2048 == 0)
	a.Deallocate(p, 1000, s)
	a.Deallocate(q, 1000, s)
	_, err := mr.NewAligned(mr.NewDirect(dev), 1000)
	fmt.Println(err)
	// Output:
	// true
	// true
	// aligned: mr: alignment 1000 is not a power of two between 1 and 1073741824
}

// A Budget is shared by the Limit adaptors over any number of resources
// and devices; a request over it is refused before it reaches the
// resource below.
func ExampleNewLimit() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()
	budget := mr.NewBudget(1 << 20) // 1 MiB for all the resources that share it
	l := mr.NewLimit(mr.NewDirect(dev), budget)
	p, _ := l.Allocate(768<<10, s)
	_, err := l.Allocate(512<<10, s)
	fmt.Println(errors.Is(err, mr.ErrOutOfMemory), budget.Used())
	var oom *mr.OutOfMemoryError
	if errors.As(err, &oom) {
		fmt.Println(oom.Reason)
	}
	l.Deallocate(p, 768<<10, s)
	// Output:
	// true 786432
	// over the budget of 1.0 MiB: 768.0 KiB in use, 512.0 KiB more do not fit
}

// Retry recovers from out-of-memory: it reaps pending frees and releases
// cached memory below it, then calls the program's callback (here it drops
// a cache of its own), and tries again.
func ExampleNewRetry() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()
	lim := mr.NewLimit(mr.NewDirect(dev), mr.NewBudget(1<<20))
	cache, _ := lim.Allocate(768<<10, s) // memory the program could give back
	r := mr.NewRetry(lim, mr.RetryOptions{
		OnOutOfMemory: func(size int, s gpu.Stream, attempt int, err error) bool {
			if cache != 0 {
				lim.Deallocate(cache, 768<<10, s)
				cache = 0
			}
			return true // try again
		},
		OnFailure: func(rep mr.OutOfMemoryReport) { fmt.Println(rep.Summary()) },
	})
	p, err := r.Allocate(512<<10, s)
	fmt.Println(err, r.Counts())
	r.Deallocate(p, 512<<10, s)
	// Output:
	// <nil> out of memory 1 time: 1 recovered, 0 failed; 1 retry, 0 B reaped
}

// Logging writes an RMM CSV log of what passes through it, which
// `streamalloc replay` replays.
func ExampleLogging() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()
	var out strings.Builder
	l := mr.NewLogging(mr.NewDirect(dev), &out, mr.LoggingOptions{Now: func() time.Time {
		return time.Date(2026, 1, 2, 9, 30, 0, 250_000_000, time.UTC)
	}})
	p, _ := l.Allocate(4096, s)
	l.Deallocate(p, 4096, s)
	l.Flush()
	log := strings.ReplaceAll(out.String(), fmt.Sprintf("%#x,4096,%#x\n", uint64(p), s.ID()), "<pointer>,4096,<stream>\n")
	fmt.Print(log)
	// Output:
	// Thread,Time,Action,Pointer,Size,Stream
	// 0,09:30:00.250000,allocate,<pointer>,4096,<stream>
	// 0,09:30:00.250000,free,<pointer>,4096,<stream>
}

// PendingFrees keeps the books of a resource whose frees are enqueued:
// bytes freed on a stream stay outstanding until a reap finds the
// stream's work complete.
func ExamplePendingFrees() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()
	var p mr.PendingFrees

	p.AddLive(1 << 20) // Allocate handed out 1 MiB
	// ... Deallocate enqueued the free on s (FreeAsync), then:
	p.Add(s, 1<<20)
	fmt.Println("outstanding:", p.Outstanding(), "pending:", p.Pending())

	n, err := p.Reap(true) // synchronize the streams holding pending frees
	fmt.Println("reaped:", n, err, "outstanding:", p.Outstanding())
	// Output:
	// outstanding: 1048576 pending: 1048576
	// reaped: 1048576 <nil> outstanding: 0
}
