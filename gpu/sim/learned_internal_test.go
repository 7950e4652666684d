package sim

import (
	"slices"
	"testing"
)

// learnedSince lists the streams the host learned of in a window of
// generations, newest first, and says when it cannot: more than the limit,
// or lessons already forgotten.
func TestLearnedSince(t *testing.T) {
	b := New(Config{})
	d, err := b.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	var ss []*stream
	var gens []uint64
	for range 3 {
		gs, err := d.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		s := gs.(*stream)
		p, err := d.MallocAsync(512, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.FreeAsync(p, s); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
		gens = append(gens, b.hostGen.Load())
	}
	collect := func(from, to uint64, limit int) ([]*stream, bool) {
		var got []*stream
		all := b.learnedSince(from, to, limit, func(s *stream) { got = append(got, s) })
		return got, all
	}
	for _, c := range []struct {
		name     string
		from, to uint64
		limit    int
		want     []*stream
		wantAll  bool
	}{
		{"everything", 0, gens[2], 10, []*stream{ss[2], ss[1], ss[0]}, true},
		{"since the first", gens[0], gens[2], 10, []*stream{ss[2], ss[1]}, true},
		{"up to the second", gens[0], gens[1], 10, []*stream{ss[1]}, true},
		{"nothing new", gens[2], gens[2], 10, nil, true},
		{"over the limit", 0, gens[2], 2, []*stream{ss[2], ss[1]}, false},
	} {
		got, all := collect(c.from, c.to, c.limit)
		if !slices.Equal(got, c.want) || all != c.wantAll {
			t.Errorf("%s: %d streams, all %v; want %d, %v", c.name, len(got), all, len(c.want), c.wantAll)
		}
	}
	s := ss[0]
	for range hostNews - 1 {
		p, err := d.MallocAsync(512, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.FreeAsync(p, s); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
	now := b.hostGen.Load()
	if got, all := collect(0, now, 1<<20); all || len(got) != hostNews {
		t.Errorf("after %d more lessons: %d streams, all %v; want the %d kept and not all", hostNews-1, len(got), all, hostNews)
	}
	if got, all := collect(gens[2], now, 1<<20); !all || len(got) != hostNews-1 {
		t.Errorf("since the third: %d streams, all %v; want %d, all", len(got), all, hostNews-1)
	}
}
