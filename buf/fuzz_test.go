package buf_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/sanitize"
)

// FuzzBufferOps runs a sequence of buffer operations, decoded from the
// fuzz input, on three streams of the simulator and against a reference
// model: a byte slice, a mask of the bytes that are defined, and the
// generation each Ref was taken at. Every operation's error must be the
// one the model predicts (nil, ErrOutOfRange, ErrLength, ErrOverlap,
// ErrUseAfterFree), and every read must match the model's defined bytes.
// The resource is wrapped by the stream-order sanitizer in refusing mode on
// an instrumented device: tracked buffers must never trip it, so any report
// surfaces as an unexpected error.
func FuzzBufferOps(f *testing.F) {
	f.Add([]byte{0, 10, 20, 4, 0, 30, 2, 50, 4, 0, 60, 3, 1, 0, 8, 9})
	f.Add([]byte{6, 0, 8, 0, 2, 99, 7, 0, 0, 9, 7, 0, 4, 0, 200})
	f.Add([]byte{1, 250, 250, 5, 5, 0, 1, 40, 3, 2, 4, 255, 255, 5, 0, 100, 100})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 300 {
			data = data[:300]
		}
		raw, err := sim.New(sim.Config{}).Device(0)
		must(t, err)
		z := sanitize.New(sanitize.Options{StackDepth: -1})
		dev := z.Device(raw)
		async, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
		must(t, err)
		defer async.Close()
		res := z.Resource(async)
		var streams [3]gpu.Stream
		for i := range streams {
			streams[i], err = dev.NewStream()
			must(t, err)
			defer streams[i].Destroy()
		}
		b, err := buf.New(res, 64, streams[0])
		must(t, err)
		model := make([]byte, 64)
		defined := make([]bool, 64)
		var refs []buf.Ref
		var refGens []uint64
		gen := b.Generation()

		next := func() int {
			if len(data) == 0 {
				return 0
			}
			v := int(data[0])
			data = data[1:]
			return v
		}
		check := func(what string, err, want error) {
			t.Helper()
			if want == nil && err != nil || want != nil && !errors.Is(err, want) {
				t.Fatalf("%s: got %v, want %v", what, err, want)
			}
		}
		rangeErr := func(off, n int) error {
			if off < 0 || n < 0 || off+n > len(model) {
				return buf.ErrOutOfRange
			}
			return nil
		}
		for len(data) > 0 {
			switch next() % 10 {
			case 0: // write bytes from the host
				off, n := next()*2-16, next()
				src := bytes.Repeat([]byte{byte(n + 1)}, n)
				want := rangeErr(off, n)
				check("copy from host", b.CopyFromHostAt(off, src), want)
				if want == nil {
					copy(model[off:], src)
					for i := off; i < off+n; i++ {
						defined[i] = true
					}
				}
			case 1: // memset
				off, n, v := next()*2-16, next()*2, byte(next())
				want := rangeErr(off, n)
				check("memset", b.MemsetAt(off, n, v), want)
				if want == nil {
					for i := off; i < off+n; i++ {
						model[i], defined[i] = v, true
					}
				}
			case 2: // resize
				n := next() * 4
				old := len(model)
				check("resize", b.Resize(n), nil)
				if n != old {
					gen = b.Generation()
				}
				nm, nd := make([]byte, n), make([]bool, n)
				copy(nm, model)
				copy(nd, defined)
				model, defined = nm, nd
			case 3: // move to another stream
				check("set stream", b.SetStream(streams[next()%3]), nil)
			case 4: // read back and compare
				off, n := next()*2-16, next()*2
				dst := make([]byte, max(n, 0))
				want := rangeErr(off, n)
				check("copy to host", b.CopyToHostAt(dst, off), want)
				if want == nil {
					must(t, b.Stream().Synchronize())
					for i := range dst {
						if defined[off+i] && dst[i] != model[off+i] {
							t.Fatalf("byte %d = %d, want %d", off+i, dst[i], model[off+i])
						}
					}
				}
			case 5: // copy within the buffer
				dst, src, n := next()*2, next()*2, next()
				want := rangeErr(dst, n)
				if want == nil {
					want = rangeErr(src, n)
				}
				if want == nil && n > 0 && src < dst+n && dst < src+n {
					want = buf.ErrOverlap
				}
				check("copy within", buf.Copy(b, dst, b, src, n), want)
				if want == nil {
					copy(model[dst:dst+n], model[src:src+n])
					copy(defined[dst:dst+n], defined[src:src+n])
				}
			case 6: // take a ref
				refs = append(refs, b.Ref())
				refGens = append(refGens, gen)
			case 7: // memset through a ref
				if len(refs) == 0 {
					continue
				}
				i, v := next()%len(refs), byte(next())
				var want error
				if refGens[i] != gen {
					want = buf.ErrUseAfterFree
				}
				check("memset through ref", refs[i].Memset(v), want)
				if want == nil {
					for j := range model {
						model[j], defined[j] = v, true
					}
				}
			case 8: // use on a random stream with a kernel-like write
				s := streams[next()%3]
				v := byte(next())
				check("use", b.Use(s, buf.Write, func() error {
					return dev.MemsetD8Async(b.Ptr(), v, b.Size(), s)
				}), nil)
				for j := range model {
					model[j], defined[j] = v, true
				}
			case 9: // close on a random stream and allocate again
				check("close", b.CloseOn(streams[next()%3]), nil)
				n := next() * 4
				b, err = buf.New(res, n, streams[next()%3])
				must(t, err)
				gen = b.Generation()
				model, defined = make([]byte, n), make([]bool, n)
			}
		}
		must(t, b.Close())
		must(t, dev.Synchronize())
		if n, _ := async.Live(); n != 0 {
			t.Fatalf("%d allocations leaked", n)
		}
	})
}
