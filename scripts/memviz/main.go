// Command memviz runs a small training-like loop on a GPU (or the
// simulated one) through streamalloc.Setup with a memory history, and
// writes the history as the pickle torch.cuda.memory._dump_snapshot
// writes, for scripts/memviz/check.py to load with PyTorch's memory_viz.
//
// The loop: weights allocated once (loadWeights), then each step an input
// batch made on a loader stream and freed on the compute stream
// (loadBatch, a cross-stream free), activations (forward) and gradients
// (backward), every buffer written by a kernel. The function names are
// what the check looks for in the snapshot's frames.
//
//	go run ./scripts/memviz -device auto -out go-snapshot.pickle
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/streamalloc/streamalloc"
	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
)

func main() {
	device := flag.String("device", "auto", "auto, cuda or sim")
	out := flag.String("out", "go-snapshot.pickle", "where to write the snapshot")
	steps := flag.Int("steps", 8, "training steps")
	flag.Parse()
	if err := run(*device, *out, *steps); err != nil {
		fmt.Fprintln(os.Stderr, "memviz:", err)
		os.Exit(1)
	}
}

type model struct {
	k               *kernels.Kernels
	compute, loader gpu.Stream
	weights         []*buf.Vector[float32]
	seed            uint32
}

// fill writes every word of v on s.
func (m *model) fill(v *buf.Vector[float32], s gpu.Stream) error {
	m.seed++
	return v.Use(s, buf.Write, func() error { return m.k.Fill(s, v.Ptr(), v.Len(), m.seed) })
}

func (m *model) alloc(n int, s gpu.Stream) (*buf.Vector[float32], error) {
	v, err := buf.NewVector[float32](nil, n, s) // the current resource: Setup's
	if err != nil {
		return nil, err
	}
	if err := m.fill(v, s); err != nil {
		v.Close()
		return nil, err
	}
	return v, nil
}

func (m *model) loadWeights() error {
	for _, n := range []int{1 << 20, 4 << 20, 1 << 20} {
		w, err := m.alloc(n, m.compute)
		if err != nil {
			return err
		}
		m.weights = append(m.weights, w)
	}
	return nil
}

func (m *model) loadBatch() (*buf.Vector[float32], error) { return m.alloc(512<<10, m.loader) }

func (m *model) forward(step int) ([]*buf.Vector[float32], error) {
	var acts []*buf.Vector[float32]
	for i := range 4 {
		a, err := m.alloc((256<<10)*(1+i)+step*1024, m.compute)
		if err != nil {
			return acts, err
		}
		acts = append(acts, a)
	}
	return acts, nil
}

func (m *model) backward() ([]*buf.Vector[float32], error) {
	var grads []*buf.Vector[float32]
	for _, w := range m.weights {
		g, err := m.alloc(w.Len(), m.compute)
		if err != nil {
			return grads, err
		}
		grads = append(grads, g)
	}
	return grads, nil
}

func closeAll(vs []*buf.Vector[float32], s gpu.Stream) error {
	for _, v := range vs {
		if err := v.CloseOn(s); err != nil {
			return err
		}
	}
	return nil
}

func run(device, out string, steps int) error {
	h, err := streamalloc.Setup(streamalloc.Config{Backend: device, Stats: true, History: 10000})
	if err != nil {
		return err
	}
	defer h.Close()
	dev, err := h.Device(0)
	if err != nil {
		return err
	}
	m := &model{}
	if m.k, err = kernels.Load(dev); err != nil {
		return err
	}
	if m.compute, err = dev.NewStream(); err != nil {
		return err
	}
	defer m.compute.Destroy()
	if m.loader, err = dev.NewStream(); err != nil {
		return err
	}
	defer m.loader.Destroy()

	if err := m.loadWeights(); err != nil {
		return err
	}
	for step := range steps {
		batch, err := m.loadBatch()
		if err != nil {
			return err
		}
		acts, err := m.forward(step)
		if err != nil {
			return err
		}
		grads, err := m.backward()
		if err != nil {
			return err
		}
		if err := closeAll(acts, m.compute); err != nil {
			return err
		}
		if err := closeAll(grads, m.compute); err != nil {
			return err
		}
		// Made on the loader stream, freed on the compute stream.
		if err := batch.CloseOn(m.compute); err != nil {
			return err
		}
	}
	if err := m.compute.Synchronize(); err != nil {
		return err
	}
	// The weights stay live: the snapshot's segments show them with the
	// stack of loadWeights.
	if err := h.DumpSnapshot(0, out); err != nil {
		return err
	}
	fmt.Printf("device: %s\n", dev.Properties().Name)
	if err := h.WriteSummary(os.Stdout); err != nil {
		return err
	}
	return closeAll(m.weights, m.compute)
}
