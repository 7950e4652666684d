package replay_test

import (
	"reflect"
	"testing"

	"github.com/streamalloc/streamalloc/replay"
)

func TestGroupByTrace(t *testing.T) {
	r := func(trace, res string) *replay.Result { return &replay.Result{Trace: trace, Resource: res} }
	a1, b1, a2, c1, b2 := r("a", "1"), r("b", "1"), r("a", "2"), r("c", "1"), r("b", "2")
	for _, c := range []struct {
		name string
		in   []*replay.Result
		want [][]*replay.Result
	}{
		{"none", nil, nil},
		{"one trace", []*replay.Result{a1, a2}, [][]*replay.Result{{a1, a2}}},
		{"interleaved, first-seen order", []*replay.Result{a1, b1, a2, c1, b2}, [][]*replay.Result{{a1, a2}, {b1, b2}, {c1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := replay.GroupByTrace(c.in, func(r *replay.Result) string { return r.Trace })
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("GroupByTrace = %v, want %v", got, c.want)
			}
		})
	}
}
