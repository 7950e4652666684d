package mr

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/streamalloc/streamalloc/gpu"
)

// TestPtrTable runs a sequence of inserts and frees against the table and
// checks each answer.
func TestPtrTable(t *testing.T) {
	var tab ptrTable[gpu.DevicePtr, string]
	errFree := errors.New("upstream refused")
	const p, q = gpu.DevicePtr(0x10000), gpu.DevicePtr(0x20000)
	tab.insert(p, 100, "p", nil)
	tab.insert(q, 200, "q", nil)
	steps := []struct {
		name string
		do   func() error
		want error
	}{
		{"wrong size", func() error { _, err := tab.take(p, 99, nil); return err }, ErrSizeMismatch},
		{"unknown", func() error { _, err := tab.take(0x30000, 100, nil); return err }, ErrUnknownPointer},
		{"failing free", func() error {
			_, err := tab.take(p, 100, func(string) error { return errFree })
			return err
		}, errFree},
		{"free", func() error {
			v, err := tab.take(p, 100, func(v string) error {
				if v != "p" {
					t.Errorf("free got %q, want p", v)
				}
				return nil
			})
			if err == nil && v != "p" {
				t.Errorf("take returned %q, want p", v)
			}
			return err
		}, nil},
		{"double free", func() error { _, err := tab.take(p, 100, nil); return err }, ErrDoubleFree},
		{"claim", func() error { _, err := tab.take(q, 200, nil); return err }, nil},
		{"free while claimed", func() error { _, err := tab.take(q, 200, nil); return err }, ErrDoubleFree},
		{"restore and free", func() error {
			tab.restore(q, 200, "q")
			_, err := tab.take(q, 200, nil)
			return err
		}, nil},
		{"handed out again", func() error {
			tab.insert(p, 50, "p2", nil)
			_, err := tab.take(p, 50, nil)
			return err
		}, nil},
	}
	for _, st := range steps {
		if err := st.do(); !errors.Is(err, st.want) || (st.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", st.name, err, st.want)
		}
	}
	if n, bytes := tab.count(); n != 0 || bytes != 0 {
		t.Errorf("count after every free: %d pointers, %d bytes", n, bytes)
	}
}

// TestPtrTableRingForgetsOldest: a shard remembers its last freedRing
// frees; an older double free reads as an unknown pointer.
func TestPtrTableRingForgetsOldest(t *testing.T) {
	var tab ptrTable[gpu.DevicePtr, struct{}]
	// freedRing+1 pointers of one shard.
	var ptrs []gpu.DevicePtr
	first := tab.shard(Alignment)
	for p := gpu.DevicePtr(Alignment); len(ptrs) <= freedRing; p += Alignment {
		if tab.shard(p) == first {
			ptrs = append(ptrs, p)
		}
	}
	for _, p := range ptrs {
		tab.insert(p, 1, struct{}{}, nil)
		if _, err := tab.take(p, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tab.take(ptrs[0], 1, nil); !errors.Is(err, ErrUnknownPointer) {
		t.Errorf("double free of the oldest of %d frees: %v, want ErrUnknownPointer", len(ptrs), err)
	}
	if _, err := tab.take(ptrs[1], 1, nil); !errors.Is(err, ErrDoubleFree) {
		t.Errorf("double free of the second oldest: %v, want ErrDoubleFree", err)
	}
}

// TestPtrTableRacingFrees: of goroutines that free one pointer at once,
// exactly one reaches the upstream.
func TestPtrTableRacingFrees(t *testing.T) {
	var tab ptrTable[gpu.DevicePtr, struct{}]
	for round := range 100 {
		p := gpu.DevicePtr(Alignment * (round + 1))
		tab.insert(p, 8, struct{}{}, nil)
		var calls, wins atomic.Int32
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				_, err := tab.take(p, 8, func(struct{}) error { calls.Add(1); return nil })
				if err == nil {
					wins.Add(1)
				} else if !errors.Is(err, ErrDoubleFree) {
					t.Errorf("losing free: %v, want ErrDoubleFree", err)
				}
			})
		}
		wg.Wait()
		if calls.Load() != 1 || wins.Load() != 1 {
			t.Fatalf("round %d: %d upstream frees, %d successes; want 1, 1", round, calls.Load(), wins.Load())
		}
	}
}

// TestPtrTablePadding: whatever the table's alignment, the last word of a
// shard and the mutex of the next are a cache line apart.
func TestPtrTablePadding(t *testing.T) {
	var tab ptrTable[gpu.DevicePtr, struct{}]
	a, b := &tab.shards[0], &tab.shards[1]
	end := uintptr(unsafe.Pointer(&a.freed[freedRing-1])) + unsafe.Sizeof(a.freed[0])
	if gap := uintptr(unsafe.Pointer(&b.mu)) - end; gap < cacheLine {
		t.Errorf("%d bytes between shards, want at least %d", gap, cacheLine)
	}
}

// FuzzPtrSlots runs a sequence of puts and deletes on one shard's hash
// table against a Go map and checks every lookup and the final contents.
// Keys come from a small set of aligned addresses, so that probe runs
// collide, wrap around the array and are shifted back by deletes.
func FuzzPtrSlots(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0x80, 0x81, 0x82})
	f.Add([]byte{1, 1, 0x81, 0x81, 2, 0x82, 3, 4, 0x83, 0x84})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var m ptrSlots[gpu.DevicePtr, int]
		ref := map[gpu.DevicePtr]int{}
		for step, op := range ops {
			k := gpu.DevicePtr(op&0x3f+1) * Alignment
			if op&0x80 == 0 {
				old, replaced := m.put(k, ptrRecord[int]{size: step, v: step})
				want, had := ref[k]
				if replaced != had || (had && old.v != want) {
					t.Fatalf("step %d: put %#x replaced %v (%d), want %v (%d)", step, k, replaced, old.v, had, want)
				}
				ref[k] = step
			} else {
				i := m.find(k)
				_, had := ref[k]
				if (i >= 0) != had {
					t.Fatalf("step %d: find %#x = %d, in the model %v", step, k, i, had)
				}
				if i >= 0 {
					m.delAt(i)
					delete(ref, k)
				}
			}
			if m.n != len(ref) {
				t.Fatalf("step %d: %d keys, want %d", step, m.n, len(ref))
			}
			for rk, rv := range ref {
				if i := m.find(rk); i < 0 || m.slots[i].r.v != rv {
					t.Fatalf("step %d: %#x not found with %d", step, rk, rv)
				}
			}
		}
	})
}
