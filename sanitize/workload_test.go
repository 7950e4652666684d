package sanitize_test

import (
	"math/rand/v2"
	"testing"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/sanitize"
)

// workload is a random sequence of tracked buffers over several streams:
// of ten draws an operation, those under allocBelow allocate a buffer on
// one stream and fill it with a kernel on another, those under checkBelow
// check one buffer's data on some stream, the rest free one on some
// stream. size draws a new buffer's length in words.
type workload struct {
	steps, allocBelow, checkBelow int
	size                          func(*rand.Rand) int
}

// run runs w on res over streams with rng, frees what is left, and
// returns how many words the checks found corrupted, read once the
// device is idle.
func (w workload) run(t *testing.T, dev gpu.Device, res mr.Resource, streams []gpu.Stream, rng *rand.Rand) uint32 {
	t.Helper()
	k, err := kernels.Load(dev)
	must(t, err)
	errs, err := buf.NewVector[uint32](res, 1, streams[0])
	must(t, err)
	must(t, errs.Memset(0))
	type live struct {
		v    *buf.Vector[uint32]
		seed uint32
	}
	var bufs []live
	pick := func() gpu.Stream { return streams[rng.IntN(len(streams))] }
	for i := range w.steps {
		switch op := rng.IntN(10); {
		case op < w.allocBelow || len(bufs) == 0: // allocate and fill
			n := w.size(rng)
			s := pick()
			v, err := buf.NewVector[uint32](res, n, s)
			must(t, err)
			seed := uint32(i) << 16
			fs := pick()
			must(t, v.Use(fs, buf.Write, func() error { return k.Fill(fs, v.Ptr(), v.Len(), seed) }))
			bufs = append(bufs, live{v, seed})
		case op < w.checkBelow: // check on some stream
			b := bufs[rng.IntN(len(bufs))]
			s := pick()
			must(t, buf.UseAll(s, []buf.Operand{{Buf: b.v.Buffer(), Access: buf.Read}, {Buf: errs.Buffer(), Access: buf.ReadWrite}},
				func() error { return k.Check(s, b.v.Ptr(), b.v.Len(), b.seed, errs.Ptr()) }))
		default: // free on some stream
			j := rng.IntN(len(bufs))
			must(t, bufs[j].v.CloseOn(pick()))
			bufs = append(bufs[:j], bufs[j+1:]...)
		}
	}
	for _, b := range bufs {
		must(t, b.v.CloseOn(pick()))
	}
	out := make([]uint32, 1)
	must(t, errs.CopyToHost(out))
	must(t, dev.Synchronize())
	must(t, errs.Close())
	must(t, dev.Synchronize())
	return out[0]
}

// failOnReports fails the test for any report on correct code (the first
// three shown) and for corrupted words.
func failOnReports(t *testing.T, reps []*sanitize.Report, corrupted uint32) {
	t.Helper()
	for i, r := range reps {
		if i < 3 {
			t.Errorf("report: %s", r.Detail())
		}
	}
	if len(reps) > 0 {
		t.Fatalf("%d reports on correct code", len(reps))
	}
	if corrupted != 0 {
		t.Fatalf("%d words corrupted", corrupted)
	}
}
