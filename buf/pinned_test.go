package buf_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// TestPinnedCopies stages a pattern into a buffer and back through pooled
// page-locked slices. The source is freed on another, idle stream while
// the buffer's stream is held: the pool must not hand its block out again
// before the copy has read it.
func TestPinnedCopies(t *testing.T) {
	e := newEnv(t)
	s, other := e.stream(), e.stream()
	const n = 8 << 10
	pool := mr.NewHostPool(e.dev)
	b, err := buf.New(e.res, n, s)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	src, err := mr.AllocateHost[byte](pool, n, s)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	want := bytes.Clone(src)
	release := e.hold(s)
	if err := b.CopyFromPinned(src, pool); err != nil {
		t.Fatal(err)
	}
	if err := mr.FreeHost(pool, src, other); err != nil {
		t.Fatal(err)
	}
	next, err := mr.AllocateHost[byte](pool, n, other)
	if err != nil {
		t.Fatal(err)
	}
	if &next[0] == &src[0] {
		t.Fatal("the pool handed out a block a queued copy still reads")
	}
	release()
	dst := next
	if err := b.CopyToPinned(dst, pool); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, want) {
		t.Error("the round trip through pinned slices changed the bytes")
	}
	if err := mr.FreeHost(pool, dst, s); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.ReleaseContext(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestPinnedCopyErrors(t *testing.T) {
	e := newEnv(t)
	s := e.stream()
	pool := mr.NewHostPool(e.dev)
	b, err := buf.New(e.res, 4096, s)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	live, err := mr.AllocateHost[byte](pool, 8192, s)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.FreeHost(pool, live, s)
	foreignDev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	foreign := mr.NewHostPool(foreignDev)
	fs, err := foreignDev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	flive, err := mr.AllocateHost[byte](foreign, 4096, fs)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		host []byte
		pool *mr.HostPool
		want error
	}{
		{"pageable memory", make([]byte, 4096), pool, mr.ErrUnknownPointer},
		{"part of a pooled slice", live[4096:], pool, mr.ErrSubSlice},
		{"another length", live, pool, buf.ErrLength},
		{"nil pool", live[:4096], nil, gpu.ErrInvalidHandle},
		{"pool of another device", flive, foreign, gpu.ErrWrongDevice},
	} {
		if err := b.CopyFromPinned(tc.host, tc.pool); !errors.Is(err, tc.want) {
			t.Errorf("CopyFromPinned(%s): %v, want %v", tc.name, err, tc.want)
		}
		if err := b.CopyToPinned(tc.host, tc.pool); !errors.Is(err, tc.want) {
			t.Errorf("CopyToPinned(%s): %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
}
