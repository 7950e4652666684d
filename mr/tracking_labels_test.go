package mr_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// inuse sums inuse_space over the samples whose label key has value
// (value "" means: samples without the key).
func inuse(p *profile.Profile, key, value string) int64 {
	var n int64
	for _, s := range p.Sample {
		v := s.Label[key]
		if (value == "" && len(v) == 0) || (len(v) == 1 && v[0] == value) {
			n += s.Value[3]
		}
	}
	return n
}

// TestTrackingLabels: allocations made under pprof.Do carry the
// goroutine's labels into the profile, the live list and the leak report,
// so device memory can be sliced by request.
func TestTrackingLabels(t *testing.T) {
	dev := simDevices(t, sim.Config{})[0]
	s := newStream(t, dev)
	tr := mr.NewTracking(mr.NewDirect(dev), mr.TrackingOptions{})
	alloc := func(n int) {
		if _, err := tr.Allocate(n, s); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	pprof.Do(ctx, pprof.Labels("request", "a", "tenant", "x"), func(context.Context) { alloc(1 << 20) })
	pprof.Do(ctx, pprof.Labels("request", "b", "tenant", "x"), func(context.Context) {
		alloc(3 << 20)
		alloc(1 << 20)
	})
	alloc(5 << 20)

	p := tr.Profile()
	for _, c := range []struct {
		key, value string
		want       int64
	}{
		{"request", "a", 1 << 20},
		{"request", "b", 4 << 20},
		{"tenant", "x", 5 << 20},
		{"request", "", 5 << 20},
	} {
		if got := inuse(p, c.key, c.value); got != c.want {
			t.Errorf("inuse_space with %s=%q: %d, want %d", c.key, c.value, got, c.want)
		}
	}
	var labelled int
	for _, a := range tr.Live() {
		if a.Labels["request"] == "b" && a.Labels["tenant"] == "x" && len(a.Labels) == 2 {
			labelled++
		}
	}
	if labelled != 2 {
		t.Errorf("%d live allocations labelled request=b, want 2", labelled)
	}
	var rep strings.Builder
	if err := tr.WriteLeakReport(&rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.String(), "; labels {request:b, tenant:x}:") {
		t.Errorf("leak report without the labels:\n%s", rep.String())
	}

	// What a user runs: go tool pprof -tagfocus on the written profile.
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	path := filepath.Join(t.TempDir(), "device.pb.gz")
	var buf bytes.Buffer
	if err := tr.WriteProfile(&buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(goTool, "tool", "pprof", "-tagfocus", "request=b", "-sample_index", "inuse_space",
		"-top", path).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "4MB") || strings.Contains(string(out), "9MB") {
		t.Errorf("go tool pprof -tagfocus request=b did not show the 4 MiB of request b:\n%s", out)
	}

	// NoLabels: the same allocation records none.
	plain := mr.NewTracking(mr.NewDirect(dev), mr.TrackingOptions{NoLabels: true})
	pprof.Do(ctx, pprof.Labels("request", "c"), func(context.Context) {
		if _, err := plain.Allocate(4096, s); err != nil {
			t.Fatal(err)
		}
	})
	if l := plain.Live(); len(l) != 1 || l[0].Labels != nil {
		t.Errorf("NoLabels recorded %v", l)
	}
}
