package mr

import (
	"slices"
	"testing"
	"time"
	"unsafe"
)

// TestStreamTable adds and drops states across the boundary where lookup
// stops scanning and starts hashing, and checks every lookup, the order of
// all, and that a published list never changes.
func TestStreamTable(t *testing.T) {
	type state struct{ id uint64 }
	var tab streamTable[state]
	var want []*state // in order of first use
	check := func(when string) {
		t.Helper()
		got := tab.all()
		if !slices.Equal(got, want) {
			t.Fatalf("%s: all is %v, want %v", when, got, want)
		}
		for _, s := range want {
			if tab.lookup(s.id) != s {
				t.Fatalf("%s: lookup(%d) is not its state", when, s.id)
			}
		}
		if tab.lookup(1000) != nil {
			t.Fatalf("%s: lookup of an unknown stream found a state", when)
		}
		// first finds the first stream in order of use, and no other.
		for i, s := range want {
			if got := tab.first(s.id); (i == 0 && got != s) || (i > 0 && got != nil) {
				t.Fatalf("%s: first(%d) = %v, want it only for the first stream", when, s.id, got)
			}
		}
		if tab.first(1000) != nil || tab.first(0) != nil {
			t.Fatalf("%s: first of an unknown stream found a state", when)
		}
	}
	check("empty")
	for id := uint64(1); id <= 2*streamScan; id++ {
		created := 0
		mk := func() *state { created++; return &state{id: id} }
		s := tab.get(id, mk)
		if again := tab.get(id, mk); again != s || created != 1 {
			t.Fatalf("get(%d) twice: %p and %p, %d states made", id, s, again, created)
		}
		want = append(want, s)
		check("after adding")
	}
	before := tab.all()
	snapshot := slices.Clone(before)
	for _, id := range []uint64{1, streamScan + 1, 2 * streamScan, 5} {
		i := slices.IndexFunc(want, func(s *state) bool { return s.id == id })
		tab.drop(id, &state{id: id}) // not its state: nothing happens
		check("after dropping another state")
		tab.drop(id, want[i])
		want = slices.Delete(want, i, i+1)
		check("after dropping")
	}
	if !slices.Equal(before, snapshot) {
		t.Errorf("a published list changed: %v, was %v", before, snapshot)
	}
}

// A table of many streams costs O(1) per stream, amortized: 100,000
// streams, each added and looked up a few times, take well under a second
// (a table that copied itself on every add took minutes), every lookup
// finds its state, and dropping most of them in one call keeps the rest.
func TestStreamTableManyStreams(t *testing.T) {
	type state struct{ id uint64 }
	var tab streamTable[state]
	const n = 100_000
	start := time.Now()
	states := make([]*state, n)
	for i := range states {
		id := uint64(i + 1)
		states[i] = tab.get(id, func() *state { return &state{id: id} })
		if tab.lookup(id) != states[i] {
			t.Fatalf("lookup(%d) right after get", id)
		}
	}
	for i, s := range states {
		if tab.lookup(uint64(i+1)) != s {
			t.Fatalf("lookup(%d) is not its state", i+1)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("%d streams took %v", n, d)
	}
	if got := tab.len(); got != n {
		t.Fatalf("len = %d, want %d", got, n)
	}
	if dropped := tab.dropIf(func(s *state) bool { return s.id%10 != 0 }); dropped != n-n/10 {
		t.Errorf("dropped %d, want %d", dropped, n-n/10)
	}
	for i, s := range states {
		want := s
		if s.id%10 != 0 {
			want = nil
		}
		if tab.lookup(uint64(i+1)) != want {
			t.Fatalf("after dropping: lookup(%d) wrong", i+1)
		}
	}
	if all := tab.all(); len(all) != n/10 || all[0].id != 10 || all[len(all)-1].id != n {
		t.Errorf("after dropping: all has %d states", len(all))
	}
}

// An ID of 0, which no backend hands out, is still a key like any other
// once the table hashes (more than streamScan streams), and IDs that
// share a home slot are all found.
func TestStreamTableHashedKeys(t *testing.T) {
	type state struct{ id uint64 }
	var tab streamTable[state]
	ids := []uint64{0}
	for i := range 3 * streamScan {
		ids = append(ids, uint64(i+1)<<40) // the same low bits: collisions are likely
	}
	for _, id := range ids {
		tab.get(id, func() *state { return &state{id: id} })
	}
	tab.mu.Lock()
	tab.publishLocked()
	tab.mu.Unlock()
	for _, id := range ids {
		if s := tab.lookup(id); s == nil || s.id != id {
			t.Errorf("lookup(%#x) = %v", id, s)
		}
	}
	if s := tab.first(0); s == nil || s.id != 0 {
		t.Errorf("first(0) = %v, want the state of the first stream, ID 0", s)
	}
	if s := tab.first(ids[1]); s != nil {
		t.Errorf("first(%#x) = %v, want nil: not the first stream", ids[1], s)
	}
	if s := tab.lookup(12345); s != nil {
		t.Errorf("lookup of an absent ID = %v", s)
	}
}

// TestStreamIndexFirstLine: the first stream's ID and state, which every
// request of a resource's only stream reads, lie on one cache line of each
// published index, and are the first stream's.
func TestStreamIndexFirstLine(t *testing.T) {
	if n := unsafe.Sizeof(streamIndex[poolStream]{}); n != 192 {
		t.Fatalf("streamIndex is %d bytes, want 192 (a size class that starts its objects on a line)", n)
	}
	var tab streamTable[poolStream]
	var first *poolStream
	for id := uint64(1); id <= 3*streamScan; id++ {
		s := tab.get(id, func() *poolStream { return &poolStream{id: id} })
		if id == 1 {
			first = s
		}
		for range 3 * streamScan { // lookups publish the states added last
			tab.lookup(id)
		}
		l := tab.cur.Load()
		at := uintptr(unsafe.Pointer(&l.first))
		if at/64 != (at+unsafe.Sizeof(l.first)-1)/64 {
			t.Fatalf("%d streams: the first stream's slot at %#x crosses a cache line", id, at)
		}
		if l.first.id != 1 || l.first.v != first {
			t.Fatalf("%d streams: the first slot holds stream %d, want stream 1", id, l.first.id)
		}
	}
}
