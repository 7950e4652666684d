package sim_test

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// A simulated device runs the same code as a real one: allocate in stream
// order, run a kernel, copy the result back.
func ExampleNew() {
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		panic(err)
	}
	fmt.Println(dev.Properties().Name, dev.Properties().Simulated)

	s, _ := dev.NewStream()
	k, _ := kernels.Load(dev)
	p, _ := dev.MallocAsync(4*1024, s)
	_ = k.Fill(s, p, 1024, 100) // word i = 100 + i
	out := make([]byte, 8)
	_ = dev.CopyDtoHAsync(out, p+4*10, s)
	_ = dev.FreeAsync(p, s)
	if err := s.Synchronize(); err != nil {
		panic(err)
	}
	fmt.Println(binary.LittleEndian.Uint32(out), binary.LittleEndian.Uint32(out[4:]))
	// Output:
	// Simulated H100 true
	// 110 111
}

// Hold blocks a stream like a long kernel, to test what happens while
// work is pending.
func ExampleDevice_Hold() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	release := dev.(*sim.Device).Hold(s)
	fmt.Println(errors.Is(s.Query(), gpu.ErrNotReady))
	release()
	fmt.Println(s.Synchronize())
	// Output:
	// true
	// <nil>
}

// FailNext injects driver failures.
func ExampleDevice_FailNext() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	dev.(*sim.Device).FailNext(sim.OpMalloc, 1, gpu.ErrOutOfMemory)
	_, err := dev.Malloc(1024)
	fmt.Println(err)
	_, err = dev.Malloc(1024)
	fmt.Println(err)
	// Output:
	// cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2)
	// <nil>
}

// HappensBefore tells whether the driver orders two operations.
func ExampleDevice_HappensBefore() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	d := dev.(*sim.Device)
	s1, _ := dev.NewStream()
	s2, _ := dev.NewStream()
	p, _ := dev.Malloc(256)
	q, _ := dev.Malloc(256)
	_ = dev.MemsetD8Async(p, 1, 256, s1)
	write := d.LastOp(s1)
	_ = dev.MemsetD8Async(q, 2, 256, s2) // other bytes: unordered is fine
	fmt.Println(d.HappensBefore(write, d.LastOp(s2)))

	e, _ := dev.NewEvent(false)
	_ = e.Record(s1)
	_ = s2.WaitEvent(e)
	_ = dev.MemsetD8Async(p, 3, 256, s2) // the same bytes: needs the wait
	fmt.Println(d.HappensBefore(write, d.LastOp(s2)))
	_ = dev.Synchronize()
	// Output:
	// false
	// true
}

// RegisterKernel gives a PTX entry a Go implementation for the simulator.
func ExampleRegisterKernel() {
	sim.RegisterKernel("example_double", func(l *sim.Launch) error {
		p, err := l.ArgPtr(0)
		if err != nil {
			return err
		}
		n, err := l.ArgUint64(1)
		if err != nil {
			return err
		}
		return l.Chunks(p, int(4*n), func(_ int, b []byte) error {
			for i := 0; i+4 <= len(b); i += 4 {
				binary.LittleEndian.PutUint32(b[i:], 2*binary.LittleEndian.Uint32(b[i:]))
			}
			return nil
		})
	})
	const ptx = ".version 7.0\n.target sm_70\n.visible .entry example_double(.param .u64 p, .param .u64 n) { ret; }"

	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	m, _ := dev.LoadModule(ptx)
	f, _ := m.Function("example_double")
	p, _ := dev.Malloc(4)
	_ = dev.CopyHtoDAsync(p, []byte{21, 0, 0, 0}, s)
	_ = dev.Launch(f, gpu.Dim3{X: 1}, gpu.Dim3{X: 1}, 0, s, p, uint64(1))
	out := make([]byte, 4)
	_ = dev.CopyDtoHAsync(out, p, s)
	_ = s.Synchronize()
	fmt.Println(out[0])
	// Output: 42
}
