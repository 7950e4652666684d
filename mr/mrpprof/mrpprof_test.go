package mrpprof_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	_ "net/http/pprof" // its handlers on the default mux, next to ours
	"runtime/pprof"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/mr/mrpprof"
)

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// TestHandlers: the profile of each device's stack and the summary, on
// the default mux next to net/http/pprof.
func TestHandlers(t *testing.T) {
	b := sim.New(sim.Config{Devices: 2})
	var stacks []mr.Resource
	var streams []gpu.Stream
	for i := range 2 {
		dev, err := b.Device(i)
		if err != nil {
			t.Fatal(err)
		}
		s, err := dev.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Destroy()
		streams = append(streams, s)
		var top mr.Resource = mr.NewDirect(dev)
		if i == 0 {
			top = mr.NewTracking(mr.NewStats(top, mr.StatsOptions{}), mr.TrackingOptions{})
		}
		stacks = append(stacks, top)
	}
	pprof.Do(context.Background(), pprof.Labels("tenant", "blue"), func(context.Context) {
		if _, err := stacks[0].Allocate(3<<20, streams[0]); err != nil {
			t.Fatal(err)
		}
	})
	mrpprof.Register(nil, stacks...)
	srv := httptest.NewServer(http.DefaultServeMux)
	defer srv.Close()

	code, body := get(t, srv.URL+mrpprof.ProfilePath)
	if code != http.StatusOK {
		t.Fatalf("profile: %d %s", code, body)
	}
	p, err := profile.ParseData(body)
	if err != nil {
		t.Fatal(err)
	}
	var inuse int64
	for _, s := range p.Sample {
		if s.Label["tenant"][0] == "blue" {
			inuse += s.Value[3]
		}
	}
	if inuse != 3<<20 || p.DefaultSampleType != "inuse_space" {
		t.Errorf("profile: %d bytes in use for tenant blue, default %q", inuse, p.DefaultSampleType)
	}
	if code, body := get(t, srv.URL+mrpprof.ProfilePath+"?debug=1&device=0"); code != http.StatusOK ||
		!strings.Contains(string(body), "mrpprof_test.TestHandlers") || !strings.Contains(string(body), "tenant:[blue]") {
		t.Errorf("text profile: %d\n%s", code, body)
	}
	for _, c := range []struct {
		query string
		code  int
		want  string
	}{
		{"?device=1", http.StatusNotFound, "device 1: no Tracking adaptor in the stack direct"},
		{"?device=7", http.StatusNotFound, "device 7: no stack of that device"},
		{"?device=first", http.StatusBadRequest, `device="first" is not an ordinal`},
	} {
		code, body := get(t, srv.URL+mrpprof.ProfilePath+c.query)
		if code != c.code || !strings.Contains(string(body), c.want) {
			t.Errorf("%s: %d %q, want %d %q", c.query, code, body, c.code, c.want)
		}
	}
	code, body = get(t, srv.URL+mrpprof.SummaryPath)
	if code != http.StatusOK || strings.Count(string(body), "streamalloc memory summary: device") != 2 ||
		!strings.Contains(string(body), "chain: tracking > stats > direct") {
		t.Errorf("summary: %d\n%s", code, body)
	}
	if code, body := get(t, srv.URL+mrpprof.SummaryPath+"?device=1"); code != http.StatusOK ||
		!strings.Contains(string(body), "chain: direct\n") || strings.Contains(string(body), "tracking") {
		t.Errorf("summary of device 1: %d\n%s", code, body)
	}
	// net/http/pprof still answers on the same mux.
	if code, _ := get(t, srv.URL+"/debug/pprof/heap?debug=1"); code != http.StatusOK {
		t.Errorf("net/http/pprof heap: %d", code)
	}
	if code, _ := get(t, srv.URL+mrpprof.ProfilePath); code != http.StatusOK {
		t.Errorf("nothing given: %d", code)
	}
}

// TestNoStacks: a handler given nothing answers 404.
func TestNoStacks(t *testing.T) {
	rec := httptest.NewRecorder()
	mrpprof.Handler().ServeHTTP(rec, httptest.NewRequest("GET", mrpprof.ProfilePath, nil))
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "no stack of that device") {
		t.Errorf("%d %q", rec.Code, rec.Body.String())
	}
}
