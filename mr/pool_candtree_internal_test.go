package mr

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// candTree keeps its streams ordered by seq whatever the order they are
// listed and unlisted in, checked against a sorted slice after every step.
func TestCandTree(t *testing.T) {
	for _, tc := range []struct {
		name  string
		order func(n int, r *rand.Rand) []int
	}{
		{"ascending", func(n int, _ *rand.Rand) []int { return seqRange(n) }},
		{"descending", func(n int, _ *rand.Rand) []int { s := seqRange(n); slices.Reverse(s); return s }},
		{"random", func(n int, r *rand.Rand) []int {
			s := seqRange(n)
			r.Shuffle(n, func(i, j int) { s[i], s[j] = s[j], s[i] })
			return s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			const n = 300
			sts := make([]*poolStream, n)
			for i := range sts {
				sts[i] = &poolStream{seq: uint64(i+1) * 3}
			}
			var tree candTree
			in := map[*poolStream]bool{}
			check := func(step string) {
				t.Helper()
				var want []uint64
				for st := range in {
					want = append(want, st.seq)
				}
				slices.Sort(want)
				var got []uint64
				for st := tree.next(0); st != nil; st = tree.next(st.seq) {
					got = append(got, st.seq)
				}
				if !slices.Equal(got, want) || tree.n != len(want) {
					t.Fatalf("%s: walk %v (n %d), want %v", step, got, tree.n, want)
				}
				// next of a seq between two listed ones is the upper one.
				for i, s := range want {
					if st := tree.next(s - 1); st == nil || st.seq != s {
						t.Fatalf("%s: next(%d) = %v, want %d", step, s-1, st, want[i])
					}
				}
			}
			for _, i := range tc.order(n, r) {
				tree.insert(sts[i])
				in[sts[i]] = true
				if i%17 == 0 {
					check("insert")
				}
			}
			check("inserted")
			// Listed in seq order or not, the tree stays shallow.
			if d := candDepth(tree.root); d > 40 {
				t.Errorf("depth %d with %d streams", d, n)
			}
			for _, i := range tc.order(n, r) {
				if r.IntN(2) == 0 {
					continue
				}
				tree.remove(sts[i])
				delete(in, sts[i])
				if i%13 == 0 {
					check("remove")
				}
			}
			check("removed")
			for st := range in {
				tree.remove(st)
			}
			if tree.root != nil || tree.n != 0 || tree.next(0) != nil {
				t.Fatalf("emptied tree: root %v, n %d", tree.root, tree.n)
			}
		})
	}
}

func seqRange(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func candDepth(n *poolStream) int {
	if n == nil {
		return 0
	}
	return 1 + max(candDepth(n.cl), candDepth(n.cr))
}
