package sanitize_test

import (
	"errors"
	"fmt"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/sanitize"
)

// The sanitizer set up for a whole program: an instrumented device (so
// streams, events and resources built on it report their orderings), a
// resource on it, and the adaptor over that. Here an untracked buffer is
// read on a second stream before its allocation on the first is ordered;
// the read is refused and returned as the report.
func Example() {
	raw, _ := sim.New(sim.Config{}).Device(0)
	z := sanitize.New(sanitize.Options{})
	dev := z.Device(raw)
	async, _ := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	defer async.Close()
	res := z.Resource(async)
	a, _ := dev.NewStream()
	defer a.Destroy()
	b, _ := dev.NewStream()
	defer b.Destroy()

	v, _ := buf.New(res, 1024, a, buf.Untracked())
	host := make([]byte, 1024)
	err := v.Use(b, buf.Read, func() error { return dev.CopyDtoHAsync(host, v.Ptr(), b) })
	fmt.Println(errors.Is(err, sanitize.UseBeforeAlloc))

	// Ordered by hand, the same read is clean.
	a.Synchronize()
	err = v.Use(b, buf.Read, func() error { return dev.CopyDtoHAsync(host, v.Ptr(), b) })
	fmt.Println(err)
	b.Synchronize()
	v.Close()
	dev.Synchronize()
	// Output:
	// true
	// <nil>
}

// Reports can go to a callback instead; the operation then goes ahead.
// Tracked buffers never trip the sanitizer: this free on a third stream
// waits for the write on the second.
func ExampleOptions_onReport() {
	raw, _ := sim.New(sim.Config{}).Device(0)
	var reports []*sanitize.Report
	z := sanitize.New(sanitize.Options{OnReport: func(r *sanitize.Report) { reports = append(reports, r) }})
	dev := z.Device(raw)
	async, _ := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	defer async.Close()
	res := z.Resource(async)
	s1, _ := dev.NewStream()
	defer s1.Destroy()
	s2, _ := dev.NewStream()
	defer s2.Destroy()
	s3, _ := dev.NewStream()
	defer s3.Destroy()

	for _, tracked := range []bool{true, false} {
		var opts []buf.Option
		if !tracked {
			opts = append(opts, buf.Untracked())
		}
		v, _ := buf.New(res, 1024, s1, opts...)
		s1.Synchronize()
		v.Use(s2, buf.Write, func() error { return nil }) // a kernel on s2
		v.CloseOn(s3)
		dev.Synchronize()
		fmt.Println("tracked:", tracked, "reports:", len(reports))
	}
	fmt.Println(reports[0].Kind.String())
	// Output:
	// tracked: true reports: 0
	// tracked: false reports: 1
	// free not ordered after a use
}

// A CUDA graph under the sanitizer: a graph that reads memory freed before
// its launch is reported, and the launch is not made.
func Example_graph() {
	raw, _ := sim.New(sim.Config{}).Device(0)
	z := sanitize.New(sanitize.Options{})
	dev := z.Device(raw)
	async, _ := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	defer async.Close()
	res := z.Resource(async)
	s, _ := dev.NewStream()
	defer s.Destroy()
	out, _ := dev.MallocHost(1024) // a captured copy needs pinned host memory
	defer dev.FreeHost(out)

	v, _ := buf.New(res, 1024, s, buf.Untracked()) // raw memory: Close frees it at once
	v.Memset(1)
	c, _ := mr.BeginCapture(s, gpu.CaptureThreadLocal, mr.CaptureOptions{})
	v.Use(s, buf.Read, func() error { return dev.CopyDtoHAsync(out, v.Ptr(), s) }) // recorded, not run
	g, _ := c.End()
	x, _ := g.Instantiate(0)
	fmt.Println("first launch:", x.Launch(s))
	v.Close()
	err := x.Launch(s)
	fmt.Println("after the free:", errors.Is(err, sanitize.UseAfterFree))
	s.Synchronize()
	x.Destroy()
	c.Release(s)
	// Output:
	// first launch: <nil>
	// after the free: true
}
