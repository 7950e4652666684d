package mr

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// frameList symbolizes pcs as "function:line", innermost first.
func frameList(pcs []uintptr) []string {
	var out []string
	fr := runtime.CallersFrames(pcs)
	for {
		f, more := fr.Next()
		if f.Function != "" {
			out = append(out, fmt.Sprintf("%s:%d", f.Function, f.Line))
		}
		if !more {
			return out
		}
	}
}

// bothStacks returns the stack of its caller's caller as callersFP and as
// runtime.Callers give it, symbolized.
//
//go:noinline
func bothStacks(depth int) (fp, rt []string) {
	buf := make([]uintptr, depth)
	n := callersFP(0, buf)
	fp = frameList(buf[:n])
	hbuf := make([]uintptr, depth)
	if hn, h := callersFPHash(0, hbuf); !slices.Equal(hbuf[:hn], buf[:n]) || h != hashPCs(buf[:n]) {
		fp = append(fp, "callersFPHash differs from callersFP and hashPCs")
	}
	buf2 := make([]uintptr, depth)
	m := runtime.Callers(2, buf2)
	rt = frameList(buf2[:m])
	return fp, rt
}

//go:noinline
func recurse(n, depth int) (fp, rt []string) {
	if n == 0 {
		return bothStacks(depth)
	}
	return recurse(n-1, depth)
}

type stacker struct{ depth int }

//go:noinline
func (s *stacker) method() (fp, rt []string) { return recurse(3, s.depth) }

func inlinable(depth int) (fp, rt []string) { return recurse(2, depth) }

// TestCallersFP checks that the frame-pointer walk gives the frames that
// runtime.Callers gives, function and line, for stacks through recursion,
// methods, closures, inlined calls, deferred calls and new goroutines,
// cut at the depth asked for; and that it ends where the runtime's frames
// begin.
func TestCallersFP(t *testing.T) {
	cases := []struct {
		name string
		get  func(depth int) (fp, rt []string)
	}{
		{"recursion", func(d int) ([]string, []string) { return recurse(20, d) }},
		{"method", func(d int) ([]string, []string) { return (&stacker{d}).method() }},
		{"method value", func(d int) ([]string, []string) { f := (&stacker{d}).method; return f() }},
		{"inlined", func(d int) ([]string, []string) { return inlinable(d) }},
		{"closure", func(d int) (fp, rt []string) {
			func() { fp, rt = recurse(1, d) }()
			return
		}},
		{"deferred", func(d int) (fp, rt []string) {
			defer func() { fp, rt = recurse(1, d) }()
			return
		}},
		{"goroutine", func(d int) (fp, rt []string) {
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); fp, rt = recurse(4, d) }()
			wg.Wait()
			return
		}},
	}
	for _, c := range cases {
		for _, depth := range []int{1, 4, 16, 64} {
			t.Run(fmt.Sprintf("%s/depth=%d", c.name, depth), func(t *testing.T) {
				for round := range 2 { // the second walk finds every address classified
					fp, rt := c.get(depth)
					// runtime.Callers goes on into the runtime (goexit);
					// the walk stops before it.
					for len(rt) > 0 && strings.HasPrefix(rt[len(rt)-1], "runtime.") {
						rt = rt[:len(rt)-1]
					}
					// Depth counts return addresses: the walk's expand to
					// at least as many frames as runtime.Callers' (which
					// counts the calls inlined at one address apart).
					common := min(len(fp), len(rt))
					if len(fp) == 0 || fmt.Sprint(fp[:common]) != fmt.Sprint(rt[:common]) || len(fp) < min(len(rt), depth) {
						t.Fatalf("round %d:\nwalk    %q\nCallers %q", round, fp, rt)
					}
					for _, f := range fp {
						if strings.HasPrefix(f, "runtime.") {
							t.Fatalf("the walk went into the runtime: %q", fp)
						}
					}
				}
			})
		}
	}
}
