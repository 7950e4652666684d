package mr_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// Two call sites that the profile must tell apart. noinline keeps them
// frames of their own.
//
//go:noinline
func allocSiteA(t testing.TB, r mr.Resource, size int, s gpu.Stream) gpu.DevicePtr {
	p, err := r.Allocate(size, s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

//go:noinline
func allocSiteB(t testing.TB, r mr.Resource, size int, s gpu.Stream) gpu.DevicePtr {
	p, err := r.Allocate(size, s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const testPkg = "github.com/streamalloc/streamalloc/mr_test."

// leafFunction is the innermost function of a sample.
func leafFunction(s *profile.Sample) string {
	if len(s.Location) == 0 || len(s.Location[0].Line) == 0 {
		return ""
	}
	return s.Location[0].Line[0].Function.Name
}

func TestTrackingProfile(t *testing.T) {
	up := newRecording()
	// A Stats adaptor above the tracking one: its frames must not show
	// as the call site.
	tr := mr.NewTracking(up, mr.TrackingOptions{})
	top := mr.NewStats(tr, mr.StatsOptions{})
	s := up.stream()

	var a []gpu.DevicePtr
	for range 3 {
		a = append(a, allocSiteA(t, top, 1000, s))
	}
	b := allocSiteB(t, top, 5000, s)
	b2 := allocSiteB(t, top, 7000, s)
	// Free one of A's and one of B's: in-use drops, alloc stays.
	if err := top.Deallocate(a[0], 1000, s); err != nil {
		t.Fatal(err)
	}
	if err := top.Deallocate(b2, 7000, s); err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	if err := tr.WriteProfile(&buf); err != nil {
		t.Fatal(err)
	}
	prof, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := prof.CheckValid(); err != nil {
		t.Fatal(err)
	}
	idx := map[string]int{}
	for i, st := range prof.SampleType {
		idx[st.Type+"/"+st.Unit] = i
	}
	for _, want := range []string{"alloc_objects/count", "alloc_space/bytes", "inuse_objects/count", "inuse_space/bytes"} {
		if _, ok := idx[want]; !ok {
			t.Fatalf("profile lacks sample type %s: %v", want, prof.SampleType)
		}
	}
	if prof.DefaultSampleType != "inuse_space" {
		t.Errorf("default sample type %q", prof.DefaultSampleType)
	}
	type site struct{ inuseBytes, inuseObjs, allocBytes, allocObjs int64 }
	got := map[string]site{}
	for _, smp := range prof.Sample {
		fn := leafFunction(smp)
		g := got[fn]
		g.inuseBytes += smp.Value[idx["inuse_space/bytes"]]
		g.inuseObjs += smp.Value[idx["inuse_objects/count"]]
		g.allocBytes += smp.Value[idx["alloc_space/bytes"]]
		g.allocObjs += smp.Value[idx["alloc_objects/count"]]
		got[fn] = g
	}
	want := map[string]site{
		testPkg + "allocSiteA": {inuseBytes: 2000, inuseObjs: 2, allocBytes: 3000, allocObjs: 3},
		testPkg + "allocSiteB": {inuseBytes: 5000, inuseObjs: 1, allocBytes: 12000, allocObjs: 2},
	}
	if len(got) != len(want) {
		t.Errorf("call sites %v, want %v", got, want)
	}
	for fn, w := range want {
		if got[fn] != w {
			t.Errorf("%s: %+v, want %+v", fn, got[fn], w)
		}
	}
	// The caller of the call site is in the stack too.
	for _, smp := range prof.Sample {
		var names []string
		for _, loc := range smp.Location {
			for _, l := range loc.Line {
				names = append(names, l.Function.Name)
			}
		}
		if !strings.Contains(strings.Join(names, " "), testPkg+"TestTrackingProfile") {
			t.Errorf("stack %v lacks the test function", names)
		}
	}

	// The leak report names both sites, B's (more bytes) first.
	var rep bytes.Buffer
	if err := tr.WriteLeakReport(&rep); err != nil {
		t.Fatal(err)
	}
	out := rep.String()
	if !strings.HasPrefix(out, "streamalloc: 7000 bytes live in 3 allocations from 2 call sites\n") {
		t.Errorf("leak report header:\n%s", out)
	}
	ia, ib := strings.Index(out, "allocSiteA"), strings.Index(out, "allocSiteB")
	if ia < 0 || ib < 0 || ib > ia {
		t.Errorf("leak report order:\n%s", out)
	}
	if strings.Contains(out, "mr.(*Stats)") {
		t.Errorf("leak report shows adaptor frames:\n%s", out)
	}
	live := tr.Live()
	if len(live) != 3 || live[0].Ptr != a[1] || live[2].Ptr != b || live[0].Seq >= live[1].Seq {
		t.Errorf("Live = %+v", live)
	}
	if fr := live[0].Frames(); len(fr) == 0 || !strings.HasSuffix(fr[0].Function, "mr.(*Stats).Allocate") {
		t.Errorf("frames of a live allocation start at %v", fr)
	}

	for _, p := range a[1:] {
		top.Deallocate(p, 1000, s)
	}
	top.Deallocate(b, 5000, s)
	rep.Reset()
	tr.WriteLeakReport(&rep)
	if rep.String() != "streamalloc: 0 bytes live in 0 allocations from 0 call sites\n" {
		t.Errorf("empty leak report:\n%s", rep.String())
	}
}

func TestTrackingAllocationCost(t *testing.T) {
	up := newNull()
	tr := mr.NewTracking(up, mr.TrackingOptions{})
	s := newFakeStream(up.dev.(*fakeDevice))
	pair := func() {
		p, _ := tr.Allocate(256, s)
		tr.Deallocate(p, 256, s)
	}
	pair() // intern the call site
	// A known call site must not allocate Go memory beyond the pointer
	// table's map growth, which a steady pair does not cause.
	if n := testing.AllocsPerRun(200, pair); n > 0 {
		t.Errorf("pair through tracking allocates %v times", n)
	}
}
