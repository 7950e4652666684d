package buf_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

func TestRoundTrip(t *testing.T) {
	e := newEnv(t)
	s := e.stream()
	b := e.buffer(1000, s)
	if b.Size() != 1000 || b.Ptr() == 0 || b.Ptr()%mr.Alignment != 0 || b.Stream() != s || b.Device() != e.dev {
		t.Fatalf("buffer fields: size %d ptr %#x", b.Size(), uint64(b.Ptr()))
	}
	want := pattern(1000, 1)
	must(t, b.CopyFromHost(want))
	must(t, b.MemsetAt(100, 50, 0xee))
	copy(want[100:150], bytes.Repeat([]byte{0xee}, 50))
	must(t, b.CopyFromHostAt(990, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}))
	copy(want[990:], []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	got := make([]byte, 1000)
	must(t, b.CopyToHost(got))
	e.sync(s)
	if !bytes.Equal(got, want) {
		t.Fatalf("contents differ")
	}
	part := make([]byte, 10)
	must(t, b.CopyToHostAt(part, 95))
	e.sync(s)
	if !bytes.Equal(part, want[95:105]) {
		t.Fatalf("CopyToHostAt = %v, want %v", part, want[95:105])
	}

	// Between buffers, whole and ranged, and within one buffer.
	c := e.buffer(1000, s)
	must(t, c.CopyFrom(b))
	must(t, buf.Copy(c, 0, b, 500, 100))
	w2 := append([]byte(nil), want...)
	copy(w2[0:100], want[500:600])
	must(t, buf.Copy(c, 900, c, 0, 100))
	copy(w2[900:1000], w2[0:100])
	must(t, c.CopyToHost(got))
	e.sync(s)
	if !bytes.Equal(got, w2) {
		t.Fatalf("buffer copies differ")
	}

	// Resize keeps the prefix and changes pointer and generation.
	g, p := c.Generation(), c.Ptr()
	must(t, c.Resize(4000))
	if c.Size() != 4000 || c.Generation() == g || c.Ptr() == p {
		t.Fatalf("resize: size %d gen %d->%d", c.Size(), g, c.Generation())
	}
	got4 := make([]byte, 1000)
	must(t, c.CopyToHostAt(got4, 0))
	e.sync(s)
	if !bytes.Equal(got4, w2) {
		t.Fatalf("resize lost the contents")
	}
	must(t, c.Resize(10))
	must(t, c.CopyToHost(got4[:10]))
	e.sync(s)
	if !bytes.Equal(got4[:10], w2[:10]) {
		t.Fatalf("shrink lost the contents")
	}
	must(t, c.Resize(10)) // same size: nothing
	must(t, b.Close())
	must(t, c.Close())
}

func TestZeroSize(t *testing.T) {
	e := newEnv(t)
	s := e.stream()
	b := e.buffer(0, s)
	if b.Ptr() != 0 || b.Size() != 0 {
		t.Fatalf("zero-size buffer: ptr %#x", uint64(b.Ptr()))
	}
	must(t, b.CopyFromHost(nil))
	must(t, b.CopyToHost([]byte{}))
	must(t, b.Memset(1))
	must(t, b.Use(s, buf.ReadWrite, func() error { return nil }))
	must(t, b.Resize(256))
	must(t, b.Memset(3))
	must(t, b.Resize(0))
	must(t, b.Close())
}

// TestBadInput: every bad call returns its typed error and leaves the
// buffer's bytes, and its neighbour's, as they were.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	s := e.stream()
	other, err := sim.New(sim.Config{}).Device(0)
	must(t, err)
	foreign, err := other.NewStream()
	must(t, err)
	defer foreign.Destroy()

	b := e.buffer(512, s)
	neighbour := e.buffer(512, s)
	defer neighbour.Close()
	defer b.Close()
	content := pattern(512, 3)
	must(t, b.CopyFromHost(content))
	must(t, neighbour.CopyFromHost(content))
	closed := e.buffer(64, s)
	must(t, closed.Close())
	var nilBuf *buf.Buffer
	var nilVec *buf.Vector[float32]
	stale := b.Ref()
	tmp := e.buffer(64, s)
	staleTmp := tmp.Ref()
	must(t, tmp.Close())
	noop := func() error { return nil }
	big := make([]byte, 513)
	// A Buffer not made by New has no state: every operation is
	// ErrNilBuffer, including the ones that order two buffers by id.
	zero := &buf.Buffer{}
	// A buffer on another device, with a neighbour's bytes to keep.
	otherRes, err := mr.NewAsync(other, mr.AsyncOptions{OwnPool: true})
	must(t, err)
	defer otherRes.Close()
	foreignBuf, err := buf.New(otherRes, 512, foreign)
	must(t, err)
	defer foreignBuf.Close()
	must(t, foreignBuf.CopyFromHost(content))
	foreignVec, err := buf.NewVector[uint32](otherRes, 128, foreign)
	must(t, err)
	defer foreignVec.Close()
	vec, err := buf.NewVector[uint32](e.res, 128, s)
	must(t, err)
	defer vec.Close()

	tests := []struct {
		name string
		err  error
		want error
	}{
		{"new nil resource and nil stream", errOf(buf.New(nil, 1, nil)), gpu.ErrInvalidHandle},
		{"new nil stream", errOf(buf.New(e.res, 1, nil)), gpu.ErrInvalidHandle},
		{"new foreign stream", errOf(buf.New(e.res, 1, foreign)), gpu.ErrWrongDevice},
		{"new negative", errOf(buf.New(e.res, -1, s)), mr.ErrInvalidSize},
		{"nil copy from host", nilBuf.CopyFromHost(content), buf.ErrNilBuffer},
		{"nil copy to host", nilBuf.CopyToHost(content), buf.ErrNilBuffer},
		{"nil memset", nilBuf.Memset(0), buf.ErrNilBuffer},
		{"nil use", nilBuf.Use(s, buf.Read, noop), buf.ErrNilBuffer},
		{"nil prepare", nilBuf.Prepare(s, buf.Read), buf.ErrNilBuffer},
		{"nil finish", nilBuf.Finish(s, buf.Read), buf.ErrNilBuffer},
		{"nil close", nilBuf.Close(), buf.ErrNilBuffer},
		{"nil close on", nilBuf.CloseOn(s), buf.ErrNilBuffer},
		{"nil resize", nilBuf.Resize(1), buf.ErrNilBuffer},
		{"nil set stream", nilBuf.SetStream(s), buf.ErrNilBuffer},
		{"nil copy from", b.CopyFrom(nil), buf.ErrNilBuffer},
		{"copy to nil", buf.Copy(nil, 0, b, 0, 1), buf.ErrNilBuffer},
		{"zero ref", buf.Ref{}.Memset(0), buf.ErrNilBuffer},
		{"zero ref copy from", b.Ref().CopyFrom(buf.Ref{}), buf.ErrNilBuffer},
		{"zero buffer copy to", buf.Copy(zero, 0, b, 0, 1), buf.ErrNilBuffer},
		{"zero buffer copy from", buf.Copy(b, 0, zero, 0, 1), buf.ErrNilBuffer},
		{"copy from zero buffer", b.CopyFrom(zero), buf.ErrNilBuffer},
		{"zero buffer use", zero.Use(s, buf.Read, noop), buf.ErrNilBuffer},
		{"zero buffer close", zero.Close(), buf.ErrNilBuffer},
		{"zero buffer ref", zero.Ref().Memset(0), buf.ErrNilBuffer},
		{"use all zero buffer", buf.UseAll(s, []buf.Operand{{Buf: b, Access: buf.Read}, {Buf: zero, Access: buf.Read}}, noop), buf.ErrNilBuffer},
		{"copy from another device", buf.Copy(b, 0, foreignBuf, 0, 512), gpu.ErrWrongDevice},
		{"copy to another device", foreignBuf.CopyFrom(b), gpu.ErrWrongDevice},
		{"vector from another device", vec.CopyFrom(foreignVec), gpu.ErrWrongDevice},
		{"vector set foreign stream", vec.SetStream(foreign), gpu.ErrWrongDevice},
		{"vector use foreign stream", vec.Use(foreign, buf.Write, noop), gpu.ErrWrongDevice},
		{"nil vector", nilVec.CopyFromHost(nil), buf.ErrNilBuffer},
		{"closed copy", closed.CopyFromHost(content[:64]), buf.ErrClosed},
		{"closed use", closed.Use(s, buf.Write, noop), buf.ErrClosed},
		{"closed close", closed.Close(), buf.ErrClosed},
		{"closed resize", closed.Resize(8), buf.ErrClosed},
		{"closed set stream", closed.SetStream(s), buf.ErrClosed},
		{"copy from closed", b.CopyFrom(closed), buf.ErrClosed},
		{"stale ref copy", staleTmp.CopyFromHost(content[:64]), buf.ErrUseAfterFree},
		{"stale ref use", staleTmp.Use(s, buf.Read, noop), buf.ErrUseAfterFree},
		{"stale ref err", staleTmp.Err(), buf.ErrUseAfterFree},
		{"copy larger than buffer", b.CopyFromHostAt(0, big), buf.ErrOutOfRange},
		{"copy past the end", b.CopyFromHostAt(500, content[:13]), buf.ErrOutOfRange},
		{"negative offset", b.CopyFromHostAt(-1, content[:1]), buf.ErrOutOfRange},
		{"read past the end", b.CopyToHostAt(make([]byte, 2), 511), buf.ErrOutOfRange},
		{"memset past the end", b.MemsetAt(256, 257, 0), buf.ErrOutOfRange},
		{"memset negative", b.MemsetAt(0, -1, 0), buf.ErrOutOfRange},
		{"huge offset", b.MemsetAt(1<<62, 1<<62, 0), buf.ErrOutOfRange},
		{"short slice", b.CopyFromHost(content[:511]), buf.ErrLength},
		{"long slice", b.CopyToHost(big), buf.ErrLength},
		{"buffers of other sizes", b.CopyFrom(closedSize(t, e, s)), buf.ErrLength},
		{"device copy past the end", buf.Copy(b, 400, neighbour, 0, 113), buf.ErrOutOfRange},
		{"device copy negative", buf.Copy(b, 0, neighbour, 0, -1), buf.ErrOutOfRange},
		{"overlapping copy", buf.Copy(b, 0, b, 100, 200), buf.ErrOverlap},
		{"use nil stream", b.Use(nil, buf.Read, noop), gpu.ErrInvalidHandle},
		{"use foreign stream", b.Use(foreign, buf.Read, noop), gpu.ErrWrongDevice},
		{"prepare foreign stream", b.Prepare(foreign, buf.Write), gpu.ErrWrongDevice},
		{"close on foreign stream", b.CloseOn(foreign), gpu.ErrWrongDevice},
		{"set foreign stream", b.SetStream(foreign), gpu.ErrWrongDevice},
		{"use bad access", b.Use(s, buf.Access(0), noop), buf.ErrAccess},
		{"use nil func", b.Use(s, buf.Read, nil), gpu.ErrInvalidValue},
		{"resize negative", b.Resize(-5), mr.ErrInvalidSize},
		{"use all nil", buf.UseAll(s, []buf.Operand{{Buf: nil, Access: buf.Read}}, noop), buf.ErrNilBuffer},
		{"use all closed", buf.UseAll(s, []buf.Operand{{Buf: b, Access: buf.Read}, {Buf: closed, Access: buf.Read}}, noop), buf.ErrClosed},
		{"use all stale", buf.UseAll(s, []buf.Operand{staleTmp.Operand(buf.Write)}, noop), buf.ErrUseAfterFree},
		{"use all foreign", buf.UseAll(foreign, []buf.Operand{{Buf: b, Access: buf.Read}}, noop), gpu.ErrWrongDevice},
		{"vector of pointers", errOf(buf.NewVector[*int](e.res, 4, s)), buf.ErrElemType},
		{"vector of strings", errOf(buf.NewVector[string](e.res, 4, s)), buf.ErrElemType},
		{"vector of struct with slice", errOf(buf.NewVector[struct {
			X float32
			Y []int
		}](e.res, 4, s)), buf.ErrElemType},
		{"vector of empty struct", errOf(buf.NewVector[struct{}](e.res, 4, s)), buf.ErrElemType},
		{"vector too long", errOf(buf.NewVector[float64](e.res, 1<<61, s)), mr.ErrInvalidSize},
		{"vector negative", errOf(buf.NewVector[float64](e.res, -1, s)), mr.ErrInvalidSize},
	}
	for _, tc := range tests {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	// Nothing was written by the failed calls; the stale Ref matches the
	// live buffer it came from.
	if stale.Err() != nil {
		t.Errorf("live ref: %v", stale.Err())
	}
	for _, x := range []*buf.Buffer{b, neighbour, foreignBuf} {
		got := make([]byte, 512)
		must(t, x.CopyToHost(got))
		must(t, x.Stream().Synchronize())
		if !bytes.Equal(got, content) {
			t.Errorf("bad calls changed the bytes")
		}
	}
	var ete *buf.ElemTypeError
	if _, err := buf.NewVector[map[int]int](e.res, 1, s); !errors.As(err, &ete) || ete.Type.Kind().String() != "map" {
		t.Errorf("ElemTypeError: %v", err)
	}
	if b.Size() != 512 || closed.Size() != 0 || closed.Ptr() != 0 || closed.Stream() != nil {
		t.Errorf("accessors after bad input")
	}
}

func closedSize(t *testing.T, e *env, s gpu.Stream) *buf.Buffer {
	b := e.buffer(100, s)
	t.Cleanup(func() { b.Close() })
	return b
}

func errOf[T any](_ T, err error) error { return err }

// TestRefGeneration: a Ref outlives its allocation, the memory goes to a
// new buffer at the same address, and the stale Ref changes nothing.
func TestRefGeneration(t *testing.T) {
	e := newEnv(t)
	s := e.stream()
	a := e.buffer(4096, s)
	ref := a.Ref()
	if ref.Err() != nil || ref.Ptr() != a.Ptr() || ref.Size() != 4096 || ref.Buffer() != a {
		t.Fatalf("fresh ref: %v", ref.Err())
	}
	must(t, ref.Memset(1))
	p := a.Ptr()
	must(t, a.Close())
	b := e.buffer(4096, s)
	defer b.Close()
	if b.Ptr() != p {
		t.Logf("resource did not reuse %#x (got %#x); the check holds all the same", uint64(p), uint64(b.Ptr()))
	}
	want := pattern(4096, 9)
	must(t, b.CopyFromHost(want))
	for name, err := range map[string]error{
		"copy":     ref.CopyFromHost(make([]byte, 4096)),
		"copy at":  ref.CopyFromHostAt(0, []byte{1}),
		"memset":   ref.Memset(0),
		"use":      ref.Use(s, buf.Write, func() error { t.Error("fn ran"); return nil }),
		"prepare":  ref.Prepare(s, buf.Write),
		"finish":   ref.Finish(s, buf.Write),
		"to host":  ref.CopyToHost(make([]byte, 4096)),
		"copyfrom": ref.CopyFrom(b.Ref()),
	} {
		if !errors.Is(err, buf.ErrUseAfterFree) {
			t.Errorf("%s through stale ref: %v", name, err)
		}
	}
	if ref.Ptr() != 0 || ref.Size() != 0 {
		t.Errorf("stale ref exposes ptr %#x size %d", uint64(ref.Ptr()), ref.Size())
	}
	got := make([]byte, 4096)
	must(t, b.CopyToHost(got))
	e.sync(s)
	if !bytes.Equal(got, want) {
		t.Fatalf("stale ref changed the new owner's bytes")
	}
	// Resize makes Refs stale too; Refs of a closed buffer are born stale.
	r2 := b.Ref()
	must(t, b.Resize(8192))
	if !errors.Is(r2.Err(), buf.ErrUseAfterFree) {
		t.Errorf("ref after resize: %v", r2.Err())
	}
	if err := b.Ref().Err(); err != nil {
		t.Errorf("new ref after resize: %v", err)
	}
	c := e.buffer(8, s)
	must(t, c.Close())
	if !errors.Is(c.Ref().Err(), buf.ErrUseAfterFree) {
		t.Errorf("ref of closed buffer is live")
	}
}

func TestVector(t *testing.T) {
	e := newEnv(t)
	s := e.stream()
	type point struct {
		X, Y float32
		ID   int64
	}
	v, err := buf.NewVector[point](e.res, 100, s)
	must(t, err)
	if v.Len() != 100 || v.Buffer().Size() != 100*16 {
		t.Fatalf("Len %d size %d", v.Len(), v.Buffer().Size())
	}
	in := make([]point, 100)
	for i := range in {
		in[i] = point{float32(i), float32(-i), int64(i) << 40}
	}
	must(t, v.CopyFromHost(in))
	must(t, v.CopyFromHostAt(98, []point{{1, 2, 3}, {4, 5, 6}}))
	in[98], in[99] = point{1, 2, 3}, point{4, 5, 6}
	out := make([]point, 100)
	must(t, v.CopyToHost(out))
	e.sync(s)
	for i := range in {
		if in[i] != out[i] {
			t.Fatalf("element %d = %v, want %v", i, out[i], in[i])
		}
	}
	w, err := buf.NewVector[point](e.res, 100, s)
	must(t, err)
	must(t, w.CopyFrom(v))
	must(t, w.Resize(150))
	part := make([]point, 3)
	must(t, w.CopyToHostAt(part, 97))
	e.sync(s)
	if part[0] != in[97] || part[2] != in[99] || w.Len() != 150 {
		t.Fatalf("after resize: %v", part)
	}
	for _, err := range []error{
		v.CopyFromHost(in[:99]), v.CopyToHost(make([]point, 101)),
		v.CopyFromHostAt(99, in[:2]), v.CopyToHostAt(part, -1), v.CopyToHostAt(part, 98),
	} {
		if !errors.Is(err, buf.ErrLength) && !errors.Is(err, buf.ErrOutOfRange) {
			t.Errorf("bad vector copy: %v", err)
		}
	}
	if err := v.CopyFrom(w); !errors.Is(err, buf.ErrLength) {
		t.Errorf("copy between vectors of other lengths: %v", err)
	}
	must(t, v.Memset(0))
	must(t, v.CopyToHost(out))
	e.sync(s)
	if out[5] != (point{}) {
		t.Fatalf("memset(0) left %v", out[5])
	}
	must(t, v.Close())
	must(t, w.Close())
	if v.Len() != 0 {
		t.Errorf("closed vector has length %d", v.Len())
	}
}
