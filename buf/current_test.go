package buf_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/mr"
)

// TestNewFromCurrent: given no resource, New and NewVector allocate from
// the current resource of the stream's device, and free there.
func TestNewFromCurrent(t *testing.T) {
	e := newEnv(t)
	s := e.stream()
	st := mr.NewStats(e.res, mr.StatsOptions{})
	prev := mr.SetCurrent(e.dev, st)
	t.Cleanup(func() { mr.SetCurrent(e.dev, prev) })

	b, err := buf.New(nil, 1000, s)
	must(t, err)
	v, err := buf.NewVector[float32](nil, 256, s)
	must(t, err)
	if b.Resource() != mr.Resource(st) || v.Buffer().Resource() != mr.Resource(st) {
		t.Fatalf("resources %v and %v, want the current one", b.Resource(), v.Buffer().Resource())
	}
	if got := st.Snapshot(); got.Allocations.Current != 2 || got.Bytes.Current != 1000+256*4 {
		t.Fatalf("current resource counted %v", got)
	}
	must(t, b.Close())
	must(t, v.Close())
	if got := st.Snapshot(); got.Allocations.Current != 0 || got.Allocations.Total != 2 {
		t.Fatalf("after Close: %v", got)
	}
}
