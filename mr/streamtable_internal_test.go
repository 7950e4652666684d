package mr

import (
	"slices"
	"testing"
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
