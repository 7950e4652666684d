package report

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func TestNarrowest(t *testing.T) {
	for _, tc := range []struct {
		vals []int64
		want string
	}{
		{nil, "u8"},
		{[]int64{0, 255}, "u8"},
		{[]int64{-1, 127}, "i8"},
		{[]int64{-1, 128}, "i16"},
		{[]int64{0, 256}, "u16"},
		{[]int64{0, 65535}, "u16"},
		{[]int64{-32768, 32767}, "i16"},
		{[]int64{0, 65536}, "u32"},
		{[]int64{0, math.MaxUint32}, "u32"},
		{[]int64{-1, 40000}, "i32"},
		{[]int64{math.MinInt32, 0}, "i32"},
		{[]int64{-1, math.MaxUint32}, "f64"},
		{[]int64{0, 1 << 53}, "f64"},
		{[]int64{-1 << 53, 0}, "f64"},
	} {
		got, err := narrowest(tc.vals)
		if err != nil || got.name != tc.want {
			t.Errorf("%v: %s %v, want %s", tc.vals, got.name, err, tc.want)
		}
	}
	for _, bad := range [][]int64{{1<<53 + 1}, {-1<<53 - 1}, {math.MaxInt64}} {
		if _, err := narrowest(bad); !errors.Is(err, errColumn) {
			t.Errorf("%v: err %v, want errColumn", bad, err)
		}
	}
}

// Columns of every width, signed and not, delta-coded or not, come back
// exactly through the layout the page's script reads.
func TestContainerRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	ranges := []struct{ lo, hi int64 }{{0, 255}, {-100, 100}, {0, 60000}, {-30000, 30000}, {0, 1 << 32}, {-1 << 31, 1 << 30}, {-1 << 52, 1 << 52}}
	var cols []column
	for i, r := range ranges {
		for _, delta := range []bool{false, true} {
			vals := make([]int64, rng.IntN(300))
			for j := range vals {
				vals[j] = r.lo + rng.Int64N(r.hi-r.lo+1)
			}
			if delta { // growing, as delta columns are
				for j := 1; j < len(vals); j++ {
					vals[j] = vals[j-1] + rng.Int64N(1+min(r.hi-r.lo, 1<<40)/max(int64(len(vals)), 1))
				}
			}
			cols = append(cols, column{name: fmt.Sprintf("c%d-%v", i, delta), vals: vals, delta: delta})
		}
	}
	cols = append(cols, column{name: "empty"})
	hdr := struct {
		Name    string                 `json:"name"`
		Columns map[string]columnEntry `json:"columns"`
	}{Name: `</script><b>"x"`}
	text, err := encodeContainer(&hdr, func(d map[string]columnEntry) { hdr.Columns = d }, cols)
	if err != nil {
		t.Fatal(err)
	}
	d, err := decodeContainer(text)
	if err != nil {
		t.Fatal(err)
	}
	if d.raw["name"] != hdr.Name {
		t.Errorf("header name %q", d.raw["name"])
	}
	for _, c := range cols {
		got := d.cols[c.name]
		if fmt.Sprint(got) != fmt.Sprint(c.vals) && !(len(got) == 0 && len(c.vals) == 0) {
			t.Errorf("column %s (%s): got %v\nwant %v", c.name, d.header.Columns[c.name].Type, got, c.vals)
		}
	}
	if len(d.cols) != len(cols) {
		t.Errorf("%d columns, want %d", len(d.cols), len(cols))
	}
	// Delta coding narrows growing columns: 0, 1000, 2000, ... is u16
	// (differences of 1000) where the values themselves need u32.
	grow := make([]int64, 100)
	for i := range grow {
		grow[i] = int64(i) * 1000
	}
	var dir map[string]columnEntry
	if _, err := encodeContainer(map[string]any{}, func(d map[string]columnEntry) { dir = d },
		[]column{{name: "a", vals: grow, delta: true}, {name: "b", vals: grow}}); err != nil {
		t.Fatal(err)
	}
	if dir["a"].Type != "u16" || dir["b"].Type != "u32" || dir["a"].Array != "i32" {
		t.Errorf("directory %+v", dir)
	}
}

func TestContainerErrors(t *testing.T) {
	set := func(map[string]columnEntry) {}
	if _, err := encodeContainer(map[string]any{}, set, []column{{name: "a", vals: []int64{1 << 60}}}); !errors.Is(err, errColumn) {
		t.Errorf("a value beyond 2^53: %v", err)
	}
	// A delta column whose differences fit but whose values do not.
	if _, err := encodeContainer(map[string]any{}, set, []column{{name: "a", vals: []int64{1 << 53, 1<<53 + 1}, delta: true}}); !errors.Is(err, errColumn) {
		t.Errorf("delta values beyond 2^53: %v", err)
	}
	if _, err := encodeContainer(map[string]any{}, set, []column{{name: "a"}, {name: "a"}}); err == nil {
		t.Error("a column twice: no error")
	}
}
