package buf_test

import (
	"errors"
	"fmt"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// Allocate and use in a kernel: the allocation is
// usable at once by work on its stream, and Use declares the kernel's
// write so that any later use on another stream is ordered after it.
func ExampleBuffer_Use() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	res, _ := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	defer res.Close()
	k, _ := kernels.Load(dev)
	s, _ := dev.NewStream()
	defer s.Destroy()

	v, err := buf.NewVector[uint32](res, 1000, s)
	if err != nil {
		fmt.Println(err)
		return
	}
	err = v.Use(s, buf.Write, func() error { return k.Fill(s, v.Ptr(), v.Len(), 42) })
	if err != nil {
		fmt.Println(err)
		return
	}
	host := make([]uint32, v.Len())
	v.CopyToHost(host)
	s.Synchronize() // the host reads the copy only after this
	fmt.Println(host[0], host[1], host[999])
	v.Close()
	// Output: 42 43 1041
}

// Allocate, compute, free, repeat: nothing blocks
// the host between iterations; each Close is ordered on the stream after
// the work that used the memory, which the next allocation may reuse.
func Example_loop() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	res, _ := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	defer res.Close()
	k, _ := kernels.Load(dev)
	s, _ := dev.NewStream()
	defer s.Destroy()

	errs, _ := buf.NewVector[uint32](res, 1, s)
	errs.Memset(0)
	for i := range 100 {
		v, err := buf.NewVector[uint32](res, 1<<12, s)
		if err != nil {
			fmt.Println(err)
			return
		}
		seed := uint32(i * 1000)
		err = buf.UseAll(s, []buf.Operand{{Buf: v.Buffer(), Access: buf.ReadWrite}, {Buf: errs.Buffer(), Access: buf.ReadWrite}},
			func() error {
				if err := k.Fill(s, v.Ptr(), v.Len(), seed); err != nil {
					return err
				}
				return k.Check(s, v.Ptr(), v.Len(), seed, errs.Ptr())
			})
		if err != nil {
			fmt.Println(err)
			return
		}
		v.Close()
	}
	count := make([]uint32, 1)
	errs.CopyToHost(count)
	s.Synchronize()
	errs.Close()
	live, _ := res.Live()
	fmt.Println("mismatches:", count[0], "live allocations:", live)
	// Output: mismatches: 0 live allocations: 0
}

// Several streams: each stream allocates and fills
// its own buffer; a copy on a third stream gathers them, and tracking
// makes it wait for both fills without a host synchronization.
func Example_streams() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	res, _ := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	defer res.Close()
	k, _ := kernels.Load(dev)

	const n = 4
	gather, _ := dev.NewStream()
	defer gather.Destroy()
	all, _ := buf.NewVector[uint32](res, 2*n, gather)
	for i := range 2 {
		s, _ := dev.NewStream()
		defer s.Destroy()
		v, _ := buf.NewVector[uint32](res, n, s)
		v.Use(s, buf.Write, func() error { return k.Fill(s, v.Ptr(), n, uint32(100*(i+1))) })
		// On the gathering stream: waits on the fill, then copies.
		buf.Copy(all.Buffer(), i*4*n, v.Buffer(), 0, 4*n)
		v.Close() // on s, after the copy on the gathering stream
	}
	host := make([]uint32, 2*n)
	all.CopyToHost(host)
	gather.Synchronize()
	fmt.Println(host)
	all.Close()
	// Output: [100 101 102 103 200 201 202 203]
}

// A Ref outliving its allocation is caught, even when the memory went to
// another buffer.
func ExampleRef() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	res, _ := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	defer res.Close()
	s, _ := dev.NewStream()
	defer s.Destroy()

	a, _ := buf.New(res, 256, s)
	ref := a.Ref()
	a.Close()
	b, _ := buf.New(res, 256, s) // may get a's memory back
	err := ref.Memset(0xff)
	fmt.Println(errors.Is(err, buf.ErrUseAfterFree))
	b.Close()
	s.Synchronize()
	// Output: true
}

// A step captured into a CUDA graph with tracked buffers and replayed
// between uses outside the graph: each launch waits on the fill of its
// input (on another stream), and the copy of its output to the host waits
// on the launch, with no event in the program. The capture is begun with
// mr.BeginCapture and the graph launched through the executable made from
// Capture.End's graph, which is what lets the buffers take part in its
// launches. (On a GPU, open the device with gpu/backend instead of the
// simulator.)
func Example_graph() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	res, _ := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	defer res.Close()
	k, _ := kernels.Load(dev)
	compute, _ := dev.NewStream() // captures and launches the step
	io, _ := dev.NewStream()      // fills the input, reads the output
	defer compute.Destroy()
	defer io.Destroy()

	const n = 1024
	in, _ := buf.NewVector[uint32](res, n, io)
	out, _ := buf.NewVector[uint32](res, n, io)

	c, err := mr.BeginCapture(compute, gpu.CaptureThreadLocal, mr.CaptureOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = buf.UseAll(compute, []buf.Operand{{Buf: in.Buffer(), Access: buf.Read}, {Buf: out.Buffer(), Access: buf.Write}},
		func() error { return dev.CopyDtoDAsync(out.Ptr(), in.Ptr(), 4*n, compute) }) // recorded, not run
	if err != nil {
		fmt.Println(err)
		return
	}
	g, err := c.End()
	if err != nil {
		fmt.Println(err)
		return
	}
	x, _ := g.Instantiate(0)

	host := make([]uint32, n)
	for step := range 3 {
		in.Use(io, buf.Write, func() error { return k.Fill(io, in.Ptr(), n, uint32(100*step)) })
		x.Launch(compute)    // after the fill
		out.CopyToHost(host) // on io, after the launch
		io.Synchronize()
		fmt.Println(host[0], host[n-1])
	}
	x.Destroy()
	in.Close() // the graph uses them: freed at Release
	out.Close()
	if err := c.Release(compute); err != nil {
		fmt.Println(err)
		return
	}
	compute.Synchronize()
	live, _ := res.Live()
	fmt.Println("live allocations:", live)
	// Output:
	// 0 1023
	// 100 1123
	// 200 1223
	// live allocations: 0
}
