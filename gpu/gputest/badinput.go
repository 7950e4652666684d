// Conformance: bad input is a typed error, and changes nothing.

package gputest

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

func testBadInput(t *testing.T, dev gpu.Device) {
	s := newStream(t, dev)
	e := newEvent(t, dev, false)
	k := load(t, dev)
	_ = k

	// Sizes.
	_, err := dev.Malloc(-1)
	wantErr(t, "Malloc(-1)", err, gpu.ErrInvalidValue)
	_, err = dev.MallocAsync(-1, s)
	wantErr(t, "MallocAsync(-1)", err, gpu.ErrInvalidValue)
	_, err = dev.MallocManaged(-1)
	wantErr(t, "MallocManaged(-1)", err, gpu.ErrInvalidValue)
	_, err = dev.MallocHost(-1)
	wantErr(t, "MallocHost(-1)", err, gpu.ErrInvalidValue)
	p, err := dev.Malloc(4096)
	must(t, err)
	wantErr(t, "MemsetD8Async(n=-1)", dev.MemsetD8Async(p, 0, -1, s), gpu.ErrInvalidValue)
	wantErr(t, "CopyDtoDAsync(n=-1)", dev.CopyDtoDAsync(p, p, -1, s), gpu.ErrInvalidValue)
	_, err = dev.Malloc(1 << 50)
	wantErr(t, "Malloc(1 PiB)", err, gpu.ErrOutOfMemory)

	// Frees.
	must(t, dev.Free(p))
	wantErr(t, "double Free", dev.Free(p), gpu.ErrInvalidValue)

	// Nil handles.
	_, err = dev.MallocAsync(256, nil)
	wantErr(t, "MallocAsync on a nil stream", err, gpu.ErrInvalidHandle)
	wantErr(t, "WaitEvent(nil)", s.WaitEvent(nil), gpu.ErrInvalidHandle)
	wantErr(t, "Record(nil)", e.Record(nil), gpu.ErrInvalidHandle)
	wantErr(t, "MemsetD8Async on a nil stream", dev.MemsetD8Async(0, 0, 1, nil), gpu.ErrInvalidHandle)
	wantErr(t, "Launch(nil function)", dev.Launch(nil, gpu.Dim3{X: 1}, gpu.Dim3{X: 1}, 0, s), gpu.ErrInvalidHandle)
	_, err = dev.MallocFromPoolAsync(256, nil, s)
	wantErr(t, "MallocFromPoolAsync(nil pool)", err, gpu.ErrInvalidHandle)

	// Destroyed streams and events, and double destroys.
	d, err := dev.NewStream()
	must(t, err)
	must(t, d.Destroy())
	wantErr(t, "Destroy twice", d.Destroy(), gpu.ErrDestroyed)
	wantErr(t, "Synchronize a destroyed stream", d.Synchronize(), gpu.ErrDestroyed)
	wantErr(t, "Query a destroyed stream", d.Query(), gpu.ErrDestroyed)
	wantErr(t, "WaitEvent on a destroyed stream", d.WaitEvent(e), gpu.ErrDestroyed)
	_, err = dev.MallocAsync(256, d)
	wantErr(t, "MallocAsync on a destroyed stream", err, gpu.ErrDestroyed)
	wantErr(t, "Record on a destroyed stream", e.Record(d), gpu.ErrDestroyed)

	de, err := dev.NewEvent(false)
	must(t, err)
	must(t, de.Destroy())
	wantErr(t, "event Destroy twice", de.Destroy(), gpu.ErrDestroyed)
	wantErr(t, "Query a destroyed event", de.Query(), gpu.ErrDestroyed)
	wantErr(t, "Synchronize a destroyed event", de.Synchronize(), gpu.ErrDestroyed)
	wantErr(t, "Record a destroyed event", de.Record(s), gpu.ErrDestroyed)
	wantErr(t, "WaitEvent on a destroyed event", s.WaitEvent(de), gpu.ErrDestroyed)

	// Destroyed pools.
	pool, err := dev.NewMemPool()
	must(t, err)
	must(t, pool.Destroy())
	wantErr(t, "pool Destroy twice", pool.Destroy(), gpu.ErrDestroyed)
	_, err = dev.MallocFromPoolAsync(256, pool, s)
	wantErr(t, "MallocFromPoolAsync on a destroyed pool", err, gpu.ErrDestroyed)

	// Modules.
	m, err := dev.LoadModule(kernelsPTX())
	must(t, err)
	_, err = m.Function("no_such_kernel")
	wantErr(t, "Function(unknown)", err, gpu.ErrNotFound)
	must(t, m.Unload())
	wantErr(t, "Unload twice", m.Unload(), gpu.ErrDestroyed)

	// After all that, the stream still works.
	must(t, s.Synchronize())
}
