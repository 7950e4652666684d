// Package mrpprof serves over HTTP what streamalloc's Tracking adaptors
// record: the device-memory profile, as net/http/pprof serves the Go heap
// profile, so that
//
//	go tool pprof http://localhost:6060/debug/pprof/device
//	go tool pprof -tagfocus tenant=blue http://localhost:6060/debug/pprof/device
//
// shows which code (and, with pprof labels, which request or tenant) holds
// device memory, and the text summary of each stack (mr.WriteSummary).
//
// Register puts both next to net/http/pprof's handlers: /debug/pprof/device
// is matched before net/http/pprof's /debug/pprof/ prefix, so the two live
// on one mux. It lives apart from package mr so that mr does not link
// net/http.
//
// Each handler is given the stacks to serve, one per device (the top of
// each, as streamalloc.Setup's Handle.Resource returns it); the request's
// device parameter picks one by ordinal. A handler reads the stacks at each
// request and keeps no state.
package mrpprof

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/streamalloc/streamalloc/mr"
)

// Paths Register serves.
const (
	ProfilePath = "/debug/pprof/device"
	SummaryPath = "/debug/streamalloc/summary"
)

// errNoStack is the reply for a device that was not given.
var errNoStack = errors.New("no stack of that device")

// pick returns the stack the request names with ?device=N, or the first.
func pick(r *http.Request, stacks []mr.Resource) (mr.Resource, int, error) {
	d := r.FormValue("device")
	if d == "" {
		if len(stacks) == 0 {
			return nil, http.StatusNotFound, errNoStack
		}
		return stacks[0], 0, nil
	}
	n, err := strconv.Atoi(d)
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("device=%q is not an ordinal", d)
	}
	for _, s := range stacks {
		if s != nil && s.Device() != nil && s.Device().Ordinal() == n {
			return s, 0, nil
		}
	}
	return nil, http.StatusNotFound, fmt.Errorf("device %d: %w", n, errNoStack)
}

// tracking finds the Tracking adaptor of a stack.
func tracking(r mr.Resource) *mr.Tracking {
	for _, res := range mr.Walk(r) {
		if t, ok := res.(*mr.Tracking); ok {
			return t
		}
	}
	return nil
}

func fail(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, "mrpprof:", err)
}

// Handler serves the device-memory profile of the Tracking adaptor in a
// stack (mr.Tracking.Profile: inuse_space by default, alloc_space and the
// object counts too), as /debug/pprof/heap serves the Go heap: the gzipped
// protocol buffer for go tool pprof, or with ?debug=1 the profile as text.
// ?device=N picks the stack of device N (default: the first given). A
// stack without a Tracking adaptor, or a device not given, is 404; a
// device that is not a number, 400.
func Handler(stacks ...mr.Resource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stack, code, err := pick(r, stacks)
		if err != nil {
			fail(w, code, err)
			return
		}
		t := tracking(stack)
		if t == nil {
			fail(w, http.StatusNotFound, fmt.Errorf("device %d: no Tracking adaptor in the stack %s",
				stack.Device().Ordinal(), mr.StatsOf(stack)))
			return
		}
		p := t.Profile()
		if d, _ := strconv.Atoi(r.FormValue("debug")); d > 0 {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprint(w, p.String())
			return
		}
		var buf bytes.Buffer
		if err := p.Write(&buf); err != nil {
			fail(w, http.StatusInternalServerError, err)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="device"`)
		w.Write(buf.Bytes())
	})
}

// SummaryHandler serves the summary of each stack given (mr.WriteSummary),
// or with ?device=N of that device's.
func SummaryHandler(stacks ...mr.Resource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chosen := stacks
		if r.FormValue("device") != "" {
			s, code, err := pick(r, stacks)
			if err != nil {
				fail(w, code, err)
				return
			}
			chosen = []mr.Resource{s}
		}
		var buf bytes.Buffer
		for i, s := range chosen {
			if i > 0 {
				buf.WriteString("\n")
			}
			mr.WriteSummary(&buf, s)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write(buf.Bytes())
	})
}

// Register serves Handler at ProfilePath and SummaryHandler at SummaryPath
// on mux, or on http.DefaultServeMux if mux is nil (where net/http/pprof
// registers its handlers).
func Register(mux *http.ServeMux, stacks ...mr.Resource) {
	if mux == nil {
		mux = http.DefaultServeMux
	}
	// GET patterns, as net/http/pprof's: a pattern for every method would
	// conflict with its "GET /debug/pprof/".
	mux.Handle("GET "+ProfilePath, Handler(stacks...))
	mux.Handle("GET "+SummaryPath, SummaryHandler(stacks...))
}
