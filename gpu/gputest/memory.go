// Conformance: allocation, kernels over allocated memory, copies, sets,
// out-of-memory.

package gputest

import (
	"bytes"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

func testProperties(t *testing.T, dev gpu.Device) {
	p := dev.Properties()
	if p.Name == "" || p.TotalMemory == 0 || p.Ordinal != dev.Ordinal() {
		t.Errorf("properties %+v: want a name, memory and ordinal %d", p, dev.Ordinal())
	}
	free, total, err := dev.MemGetInfo()
	must(t, err)
	if total == 0 || free > total {
		t.Errorf("MemGetInfo: free %d, total %d", free, total)
	}
}

// testNotebookLoop is the notebook loop that shows why stream-ordered
// allocation matters: allocate 4 MiB in stream order, fill it with a
// kernel, check it, free it, 100 times on one stream.
func testNotebookLoop(t *testing.T, dev gpu.Device) {
	const size = 4 << 20
	const n = size / 4
	s := newStream(t, dev)
	k := load(t, dev)
	errs := newCounter(t, dev, s)
	first := make([]byte, size)
	for i := range 100 {
		p, err := dev.MallocAsync(size, s)
		must(t, err)
		if p == 0 || p%256 != 0 {
			t.Fatalf("iteration %d: MallocAsync returned %#x, want a non-null 256-aligned pointer", i, uint64(p))
		}
		must(t, k.Fill(s, p, n, uint32(i)))
		must(t, k.Check(s, p, n, uint32(i), errs.p))
		if i == 0 {
			must(t, dev.CopyDtoHAsync(first, p, s))
		}
		must(t, dev.FreeAsync(p, s))
	}
	if got := errs.read(t, s); got != 0 {
		t.Fatalf("check kernel counted %d mismatched words over 100 iterations, want 0", got)
	}
	checkPattern(t, "iteration 0 copied back", first, 0)

	// The check kernel must be able to fail: a wrong seed mismatches every word.
	p, err := dev.MallocAsync(size, s)
	must(t, err)
	must(t, k.Fill(s, p, n, 1))
	must(t, k.Check(s, p, n, 2, errs.p))
	must(t, dev.FreeAsync(p, s))
	if got := errs.read(t, s); got != n {
		t.Fatalf("check with a wrong seed counted %d mismatches, want %d", got, n)
	}
}

func testCopiesAndMemset(t *testing.T, dev gpu.Device) {
	const size = 1<<20 + 3 // odd on purpose
	s := newStream(t, dev)
	a, err := dev.Malloc(size)
	must(t, err)
	defer func() { must(t, dev.Free(a)) }()
	b, err := dev.MallocAsync(size, s)
	must(t, err)
	defer func() { must(t, dev.FreeAsync(b, s)); must(t, s.Synchronize()) }()

	src := make([]byte, size)
	for i := range src {
		src[i] = byte(i*7 + 1)
	}
	must(t, dev.MemsetD8Async(a, 0xAB, size, s))
	must(t, dev.CopyHtoDAsync(a+100, src[:1000], s))
	clear(src[:1000]) // the copy must not depend on src after the call
	for i := range 1000 {
		src[i] = byte(i*7 + 1)
	}
	must(t, dev.CopyDtoDAsync(b, a, size, s))
	must(t, dev.MemsetD8Async(b+size-10, 0x5C, 10, s))
	got := make([]byte, size)
	must(t, dev.CopyDtoHAsync(got, b, s))
	must(t, s.Synchronize())

	want := bytes.Repeat([]byte{0xAB}, size)
	copy(want[100:], src[:1000])
	copy(want[size-10:], bytes.Repeat([]byte{0x5C}, 10))
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("byte %d after set, copy and set: %#x, want %#x", i, got[i], want[i])
	}

	// Zero-length copies and sets are no-ops.
	must(t, dev.MemsetD8Async(a, 0, 0, s))
	must(t, dev.CopyHtoDAsync(a, nil, s))
	must(t, dev.CopyDtoHAsync(nil, a, s))
	must(t, dev.CopyDtoDAsync(b, a, 0, s))
	must(t, s.Synchronize())
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

func testManagedAndHost(t *testing.T, dev gpu.Device) {
	const size = 64 << 10
	s := newStream(t, dev)
	m, err := dev.MallocManaged(size)
	must(t, err)
	if m == 0 || m%256 != 0 {
		t.Fatalf("MallocManaged returned %#x", uint64(m))
	}
	h, err := dev.MallocHost(size)
	must(t, err)
	if len(h) != size {
		t.Fatalf("MallocHost(%d) returned %d bytes", size, len(h))
	}
	for i := range h {
		h[i] = byte(i)
	}
	must(t, dev.CopyHtoDAsync(m, h, s))
	back := make([]byte, size)
	must(t, dev.CopyDtoHAsync(back, m, s))
	must(t, s.Synchronize())
	if !bytes.Equal(back, h) {
		t.Fatal("managed memory did not round-trip")
	}
	must(t, dev.Free(m))
	must(t, dev.FreeHost(h))
}

func testOutOfMemory(t *testing.T, dev gpu.Device) {
	const absurd = 1 << 50 // a petabyte
	s := newStream(t, dev)
	_, err := dev.Malloc(absurd)
	wantErr(t, "Malloc(1 PiB)", err, gpu.ErrOutOfMemory)
	_, err = dev.MallocAsync(absurd, s)
	wantErr(t, "MallocAsync(1 PiB)", err, gpu.ErrOutOfMemory)
	pool, err := dev.NewMemPool()
	must(t, err)
	defer func() { must(t, pool.Destroy()) }()
	_, err = dev.MallocFromPoolAsync(absurd, pool, s)
	wantErr(t, "MallocFromPoolAsync(1 PiB)", err, gpu.ErrOutOfMemory)

	// The device and the stream are still usable.
	k := load(t, dev)
	errs := newCounter(t, dev, s)
	p, err := dev.MallocAsync(1<<20, s)
	must(t, err)
	must(t, k.Fill(s, p, 1<<18, 42))
	must(t, k.Check(s, p, 1<<18, 42, errs.p))
	must(t, dev.FreeAsync(p, s))
	if got := errs.read(t, s); got != 0 {
		t.Fatalf("after out-of-memory: %d mismatches", got)
	}
	must(t, dev.Synchronize())
}
