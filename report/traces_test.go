package report

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/replay"
	"github.com/streamalloc/streamalloc/trace"
)

// pageEnv names a file that TestPageFromSharedTraces writes its page to,
// to look at it.
const pageEnv = "STREAMALLOC_REPORT_HTML"

// The page of the three shared traces (replay/testdata) replayed on the
// simulator with async, pool and arena, as `streamalloc replay --device
// sim --resource async,pool,arena --html` makes it: the data of each trace
// decode to what the replays measured. Live bytes derived from the blocks
// (as the page's script derives them) peak at the trace's peak live bytes;
// each resource's reserved steps peak at its peak reserved bytes; the
// pool's segments alive after each event add up to its reserved bytes.
func TestPageFromSharedTraces(t *testing.T) {
	files, err := filepath.Glob("../replay/testdata/*.csv.gz")
	if err != nil || len(files) != 3 {
		t.Fatalf("shared traces: %v %v", files, err)
	}
	resources := []struct {
		name string
		make func(dev *sim.Device) (mr.Resource, error)
	}{
		{"async", func(dev *sim.Device) (mr.Resource, error) { return mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true}) }},
		{"pool", func(dev *sim.Device) (mr.Resource, error) { return mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{}) }},
		{"arena", func(dev *sim.Device) (mr.Resource, error) { return mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{}) }},
	}
	var results []*replay.Result
	for _, file := range files {
		for _, rs := range resources {
			d, err := sim.New(sim.Config{}).Device(0)
			if err != nil {
				t.Fatal(err)
			}
			res, err := rs.make(d.(*sim.Device))
			if err != nil {
				t.Fatal(err)
			}
			f, err := trace.Open(file, nil)
			if err != nil {
				t.Fatal(err)
			}
			r, err := replay.Run(context.Background(), f, d, res, replay.Options{Resource: rs.name, SeriesPoints: 2000, Timeline: true})
			f.Close()
			if err != nil {
				t.Fatalf("%s on %s: %v", file, rs.name, err)
			}
			results = append(results, r)
		}
	}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, results, Options{Command: "go test ./report -run TestPageFromSharedTraces"}); err != nil {
		t.Fatal(err)
	}
	data, err := pageData(buf.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != len(files) {
		t.Fatalf("%d containers, want %d", len(data), len(files))
	}
	for i := range files {
		d := data["sa-data-"+strconv.Itoa(i)]
		mine := results[3*i : 3*i+3]
		if d.header.Name != mine[0].Trace || d.header.Events != mine[0].Events || d.header.Blocks != int(mine[0].Allocations) || !d.header.Timed {
			t.Fatalf("trace %d header %+v", i, d.header)
		}
		if got := derivedPeakLive(d); got != mine[0].PeakLiveBytes {
			t.Errorf("%s: live bytes from the page's blocks peak at %d, the replay's at %d", d.header.Name, got, mine[0].PeakLiveBytes)
		}
		for k, r := range mine {
			p := resPrefix(k)
			var peak int64
			for _, v := range d.cols[p+"res.val"] {
				peak = max(peak, v)
			}
			if uint64(peak) != r.PeakReservedBytes || d.header.Resources[k].Name != r.Resource {
				t.Errorf("%s %s: reserved steps peak at %d, the replay's %d", d.header.Name, r.Resource, peak, r.PeakReservedBytes)
			}
			if r.Resource == "pool" {
				checkSegmentsAreReserved(t, d, p)
			}
		}
	}
	if out := os.Getenv(pageEnv); out != "" {
		if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", out, buf.Len())
	}
}

func derivedPeakLive(d *decoded) uint64 {
	delta := make([]int64, d.header.Events+1)
	for i, a := range d.cols["alloc"] {
		delta[a] += d.cols["size"][i]
		if f := d.cols["free"][i]; f >= 0 {
			delta[f] -= d.cols["size"][i]
		}
	}
	var live, peak int64
	for _, x := range delta {
		live += x
		peak = max(peak, live)
	}
	return uint64(peak)
}

// checkSegmentsAreReserved: the reported segments of resource p alive
// after each event add up to its reserved bytes then.
func checkSegmentsAreReserved(t *testing.T, d *decoded, p string) {
	t.Helper()
	n := d.header.Events
	seg := make([]int64, n+1)
	for s, from := range d.cols[p+"s.from"] {
		if d.cols[p+"s.kind"][s] != segReported {
			continue
		}
		seg[from] += d.cols[p+"s.size"][s]
		if to := d.cols[p+"s.to"][s]; to >= 0 {
			seg[to] -= d.cols[p+"s.size"][s]
		}
	}
	ev, val := d.cols[p+"res.ev"], d.cols[p+"res.val"]
	var sum int64
	k := 0
	for e := range n {
		sum += seg[e]
		for k+1 < len(ev) && ev[k+1] <= e {
			k++
		}
		if sum != val[k] {
			t.Fatalf("%s %s after event %d: segments %d bytes, reserved %d", d.header.Name, p, e, sum, val[k])
		}
	}
}
