// Conformance: bad input is a typed error, and changes nothing.

package gputest

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
)

// Handles of another backend: they satisfy the interfaces, and neither
// backend can use them.
type (
	foreignStream struct{ gpu.Stream }
	foreignEvent  struct{ gpu.Event }
	foreignPool   struct{ gpu.MemPool }
	foreignFunc   struct{}
)

func (foreignFunc) Name() string { return "foreign" }

// second is the error of a two-result call.
func second[T any](_ T, err error) error { return err }

func testBadInput(t *testing.T, dev gpu.Device) {
	s := newStream(t, dev)
	e := newEvent(t, dev, false)
	def, err := dev.DefaultMemPool()
	must(t, err)

	// Sizes.
	_, err = dev.Malloc(-1)
	wantErr(t, "Malloc(-1)", err, gpu.ErrInvalidValue)
	_, err = dev.MallocAsync(-1, s)
	wantErr(t, "MallocAsync(-1)", err, gpu.ErrInvalidValue)
	_, err = dev.MallocManaged(-1)
	wantErr(t, "MallocManaged(-1)", err, gpu.ErrInvalidValue)
	_, err = dev.MallocHost(-1)
	wantErr(t, "MallocHost(-1)", err, gpu.ErrInvalidValue)
	_, err = dev.MallocFromPoolAsync(-1, def, s)
	wantErr(t, "MallocFromPoolAsync(-1)", err, gpu.ErrInvalidValue)
	// Zero bytes is no allocation: refused like cuMemAlloc(0), on every
	// allocation call (the driver itself accepts cuMemAllocAsync(0)).
	_, err = dev.Malloc(0)
	wantErr(t, "Malloc(0)", err, gpu.ErrInvalidValue)
	_, err = dev.MallocAsync(0, s)
	wantErr(t, "MallocAsync(0)", err, gpu.ErrInvalidValue)
	_, err = dev.MallocFromPoolAsync(0, def, s)
	wantErr(t, "MallocFromPoolAsync(0)", err, gpu.ErrInvalidValue)
	_, err = dev.MallocManaged(0)
	wantErr(t, "MallocManaged(0)", err, gpu.ErrInvalidValue)
	_, err = dev.MallocHost(0)
	wantErr(t, "MallocHost(0)", err, gpu.ErrInvalidValue)
	p, err := dev.Malloc(4096)
	must(t, err)
	wantErr(t, "MemsetD8Async(n=-1)", dev.MemsetD8Async(p, 0, -1, s), gpu.ErrInvalidValue)
	wantErr(t, "CopyDtoDAsync(n=-1)", dev.CopyDtoDAsync(p, p, -1, s), gpu.ErrInvalidValue)
	_, err = dev.Malloc(1 << 50)
	wantErr(t, "Malloc(1 PiB)", err, gpu.ErrOutOfMemory)

	// Frees.
	must(t, dev.Free(p))
	wantErr(t, "double Free", dev.Free(p), gpu.ErrInvalidValue)
	wantErr(t, "Free(null)", dev.Free(0), gpu.ErrInvalidValue)
	wantErr(t, "FreeAsync(null)", dev.FreeAsync(0, s), gpu.ErrInvalidValue)
	wantErr(t, "FreeHost(Go memory)", dev.FreeHost(make([]byte, 64)), gpu.ErrInvalidValue)
	h, err := dev.MallocHost(4096)
	must(t, err)
	must(t, dev.FreeHost(h))
	wantErr(t, "FreeHost twice", dev.FreeHost(h), gpu.ErrInvalidValue)

	// Nil handles.
	_, err = dev.MallocAsync(256, nil)
	wantErr(t, "MallocAsync on a nil stream", err, gpu.ErrInvalidHandle)
	wantErr(t, "WaitEvent(nil)", s.WaitEvent(nil), gpu.ErrInvalidHandle)
	wantErr(t, "Record(nil)", e.Record(nil), gpu.ErrInvalidHandle)
	wantErr(t, "MemsetD8Async on a nil stream", dev.MemsetD8Async(0, 0, 1, nil), gpu.ErrInvalidHandle)
	wantErr(t, "Launch(nil function)", dev.Launch(nil, gpu.Dim3{X: 1}, gpu.Dim3{X: 1}, 0, s), gpu.ErrInvalidHandle)
	_, err = dev.MallocFromPoolAsync(256, nil, s)
	wantErr(t, "MallocFromPoolAsync(nil pool)", err, gpu.ErrInvalidHandle)

	// Handles of another backend count as handles of another device.
	wantErr(t, "MallocAsync on another backend's stream", second(dev.MallocAsync(256, foreignStream{})), gpu.ErrWrongDevice)
	wantErr(t, "Record on another backend's stream", e.Record(foreignStream{}), gpu.ErrWrongDevice)
	wantErr(t, "WaitEvent(another backend's event)", s.WaitEvent(foreignEvent{}), gpu.ErrWrongDevice)
	wantErr(t, "MallocFromPoolAsync(another backend's pool)", second(dev.MallocFromPoolAsync(256, foreignPool{}, s)), gpu.ErrWrongDevice)
	wantErr(t, "Launch(another backend's function)", dev.Launch(foreignFunc{}, gpu.Dim3{X: 1}, gpu.Dim3{X: 1}, 0, s), gpu.ErrWrongDevice)

	// Destroyed streams and events, and double destroys. Async calls on
	// a destroyed stream are refused whatever their other arguments.
	live, err := dev.Malloc(4096)
	must(t, err)
	d, err := dev.NewStream()
	must(t, err)
	must(t, d.Destroy())
	for _, c := range []struct {
		what string
		err  error
	}{
		{"FreeAsync", dev.FreeAsync(live, d)},
		{"MallocFromPoolAsync", second(dev.MallocFromPoolAsync(256, def, d))},
		{"MemsetD8Async", dev.MemsetD8Async(live, 0, 16, d)},
		{"CopyHtoDAsync", dev.CopyHtoDAsync(live, make([]byte, 16), d)},
		{"CopyDtoHAsync", dev.CopyDtoHAsync(make([]byte, 16), live, d)},
		{"CopyDtoDAsync", dev.CopyDtoDAsync(live+16, live, 16, d)},
	} {
		wantErr(t, c.what+" on a destroyed stream", c.err, gpu.ErrDestroyed)
	}
	must(t, dev.Free(live)) // the refused FreeAsync freed nothing
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
	wantErr(t, "ElapsedSince on a destroyed event", second(de.ElapsedSince(e)), gpu.ErrDestroyed)
	wantErr(t, "ElapsedSince(destroyed event)", second(e.ElapsedSince(de)), gpu.ErrDestroyed)
	wantErr(t, "ElapsedSince(nil)", second(e.ElapsedSince(nil)), gpu.ErrInvalidHandle)

	// Destroyed pools.
	pool, err := dev.NewMemPool()
	must(t, err)
	must(t, pool.Destroy())
	wantErr(t, "pool Destroy twice", pool.Destroy(), gpu.ErrDestroyed)
	_, err = dev.MallocFromPoolAsync(256, pool, s)
	wantErr(t, "MallocFromPoolAsync on a destroyed pool", err, gpu.ErrDestroyed)
	wantErr(t, "Attribute of a destroyed pool", second(pool.Attribute(gpu.PoolReleaseThreshold)), gpu.ErrDestroyed)
	wantErr(t, "SetAttribute of a destroyed pool", pool.SetAttribute(gpu.PoolReleaseThreshold, 0), gpu.ErrDestroyed)
	wantErr(t, "TrimTo of a destroyed pool", pool.TrimTo(0), gpu.ErrDestroyed)

	// Modules.
	m, err := dev.LoadModule(kernelsPTX())
	must(t, err)
	_, err = m.Function("no_such_kernel")
	wantErr(t, "Function(unknown)", err, gpu.ErrNotFound)
	spin, err := m.Function(kernels.SpinEntry)
	must(t, err)
	must(t, m.Unload())
	wantErr(t, "Unload twice", m.Unload(), gpu.ErrDestroyed)
	wantErr(t, "Function after Unload", second(m.Function(kernels.SpinEntry)), gpu.ErrDestroyed)
	wantErr(t, "Launch after Unload", dev.Launch(spin, gpu.Dim3{X: 1}, gpu.Dim3{X: 1}, 0, s, uint64(0)), gpu.ErrDestroyed)

	// After all that, the stream still works.
	must(t, s.Synchronize())
}
