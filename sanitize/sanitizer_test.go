package sanitize_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/buf"
	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/sanitize"
)

// collector gathers reports in callback mode.
type collector struct{ reps []*sanitize.Report }

func (c *collector) opts() sanitize.Options {
	return sanitize.Options{OnReport: func(r *sanitize.Report) { c.reps = append(c.reps, r) }}
}

func (c *collector) kinds() []sanitize.Kind {
	var ks []sanitize.Kind
	for _, r := range c.reps {
		ks = append(ks, r.Kind)
	}
	return ks
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestKinds drives each hazard, and its ordered twin, through the raw
// API: the sanitizer must report exactly the expected kinds.
func TestKinds(t *testing.T) {
	type env struct {
		z          *sanitize.Sanitizer
		res        *sanitize.Resource
		up         *fakeRes
		s1, s2, s3 *fakeStream
	}
	tests := []struct {
		name   string
		opts   func(*sanitize.Options)
		run    func(t *testing.T, e *env)
		expect []sanitize.Kind
	}{
		{"use on other stream before alloc", nil, func(t *testing.T, e *env) {
			p, _ := e.res.Allocate(1024, e.s1)
			must(t, e.z.Use(p, 1024, e.s2, buf.Read))
		}, []sanitize.Kind{sanitize.UseBeforeAlloc}},
		{"use on other stream after event", nil, func(t *testing.T, e *env) {
			p, _ := e.res.Allocate(1024, e.s1)
			ev := &fakeEvent{}
			must(t, e.z.RecordEvent(ev, e.s1))
			must(t, e.z.WaitEvent(e.s2, ev))
			must(t, e.z.Use(p, 1024, e.s2, buf.Read))
		}, nil},
		{"use on other stream after host sync", nil, func(t *testing.T, e *env) {
			p, _ := e.res.Allocate(1024, e.s1)
			must(t, e.z.Synchronize(e.s1))
			must(t, e.z.Use(p, 1024, e.s2, buf.Write))
		}, nil},
		{"event recorded before the alloc does not order it", nil, func(t *testing.T, e *env) {
			ev := &fakeEvent{}
			must(t, e.z.RecordEvent(ev, e.s1))
			p, _ := e.res.Allocate(1024, e.s1)
			must(t, e.z.WaitEvent(e.s2, ev))
			must(t, e.z.Use(p, 1024, e.s2, buf.Read))
		}, []sanitize.Kind{sanitize.UseBeforeAlloc}},
		{"use after free", nil, func(t *testing.T, e *env) {
			p, _ := e.res.Allocate(1024, e.s1)
			must(t, e.res.Deallocate(p, 1024, e.s1))
			must(t, e.z.Use(p+8, 8, e.s1, buf.Read))
		}, []sanitize.Kind{sanitize.UseAfterFree}},
		{"free on third stream before use", nil, func(t *testing.T, e *env) {
			p, _ := e.res.Allocate(1024, e.s1)
			must(t, e.z.Synchronize(e.s1))
			must(t, e.z.Use(p, 1024, e.s2, buf.Write))
			must(t, e.res.Deallocate(p, 1024, e.s3))
		}, []sanitize.Kind{sanitize.FreeBeforeUse}},
		{"free on third stream after use", nil, func(t *testing.T, e *env) {
			p, _ := e.res.Allocate(1024, e.s1)
			must(t, e.z.Synchronize(e.s1))
			must(t, e.z.Use(p, 1024, e.s2, buf.Write))
			ev := &fakeEvent{}
			must(t, e.z.RecordEvent(ev, e.s2))
			must(t, e.z.WaitEvent(e.s3, ev))
			must(t, e.res.Deallocate(p, 1024, e.s3))
		}, nil},
		{"free on other stream after use on allocation stream", nil, func(t *testing.T, e *env) {
			p, _ := e.res.Allocate(1024, e.s1)
			must(t, e.z.Use(p, 1024, e.s1, buf.Write))
			must(t, e.res.Deallocate(p, 1024, e.s2))
		}, nil},
		{"strict: free on other stream after use on allocation stream",
			func(o *sanitize.Options) { o.StrictCrossStreamFree = true },
			func(t *testing.T, e *env) {
				p, _ := e.res.Allocate(1024, e.s1)
				must(t, e.z.Use(p, 1024, e.s1, buf.Write))
				must(t, e.res.Deallocate(p, 1024, e.s2))
			}, []sanitize.Kind{sanitize.FreeBeforeUse, sanitize.FreeBeforeUse}},
		{"reuse on other stream before free is ordered", nil, func(t *testing.T, e *env) {
			p, _ := e.res.Allocate(1024, e.s1)
			e.s1.busy = true
			must(t, e.res.Deallocate(p, 1024, e.s1))
			e.up.reuse = append(e.up.reuse, p)
			q, _ := e.res.Allocate(512, e.s2)
			if q != p {
				t.Fatalf("fake resource did not reuse")
			}
		}, []sanitize.Kind{sanitize.ReuseBeforeFree}},
		{"reuse on other stream after the free completed", nil, func(t *testing.T, e *env) {
			p, _ := e.res.Allocate(1024, e.s1)
			must(t, e.res.Deallocate(p, 1024, e.s1))
			e.up.reuse = append(e.up.reuse, p)
			e.res.Allocate(512, e.s2)
		}, nil},
		{"reuse ordered by the upstream", func(o *sanitize.Options) { o.UpstreamOrdersReuse = true },
			func(t *testing.T, e *env) {
				p, _ := e.res.Allocate(1024, e.s1)
				e.s1.busy = true
				must(t, e.res.Deallocate(p, 1024, e.s1))
				e.up.reuse = append(e.up.reuse, p)
				e.res.Allocate(512, e.s2)
			}, nil},
		{"reuse on the same stream", nil, func(t *testing.T, e *env) {
			p, _ := e.res.Allocate(1024, e.s1)
			e.s1.busy = true
			must(t, e.res.Deallocate(p, 1024, e.s1))
			e.up.reuse = append(e.up.reuse, p)
			q, _ := e.res.Allocate(1024, e.s1)
			must(t, e.z.Use(q, 1024, e.s1, buf.Write))
		}, nil},
		{"handed out twice", nil, func(t *testing.T, e *env) {
			p, _ := e.res.Allocate(1024, e.s1)
			e.up.reuse = append(e.up.reuse, p+256)
			e.res.Allocate(256, e.s1)
		}, []sanitize.Kind{sanitize.ReuseBeforeFree}},
		{"write then read on another stream", nil, func(t *testing.T, e *env) {
			p, _ := e.res.Allocate(1024, e.s1)
			must(t, e.z.Synchronize(e.s1))
			must(t, e.z.Use(p, 1024, e.s1, buf.Write))
			must(t, e.z.Use(p, 1024, e.s2, buf.Read))
		}, []sanitize.Kind{sanitize.Race}},
		{"reads on two streams", nil, func(t *testing.T, e *env) {
			p, _ := e.res.Allocate(1024, e.s1)
			must(t, e.z.Synchronize(e.s1))
			must(t, e.z.Use(p, 1024, e.s1, buf.Read))
			must(t, e.z.Use(p, 1024, e.s2, buf.Read))
		}, nil},
		{"write after reads on two streams", nil, func(t *testing.T, e *env) {
			p, _ := e.res.Allocate(1024, e.s1)
			must(t, e.z.Synchronize(e.s1))
			must(t, e.z.Use(p, 1024, e.s1, buf.Read))
			must(t, e.z.Use(p, 1024, e.s2, buf.Read))
			must(t, e.z.Use(p, 1024, e.s3, buf.Write))
		}, []sanitize.Kind{sanitize.Race, sanitize.Race}},
		{"use past the end", nil, func(t *testing.T, e *env) {
			p, _ := e.res.Allocate(1000, e.s1)
			must(t, e.z.Use(p+512, 512, e.s1, buf.Write))
		}, []sanitize.Kind{sanitize.OutOfBounds}},
		{"memory the sanitizer never saw", nil, func(t *testing.T, e *env) {
			must(t, e.z.Use(12345, 8, e.s1, buf.Write))
		}, nil},
		{"freed tail of a reused region is still freed", nil, func(t *testing.T, e *env) {
			p, _ := e.res.Allocate(4096, e.s1)
			must(t, e.res.Deallocate(p, 4096, e.s1))
			e.up.reuse = append(e.up.reuse, p)
			e.res.Allocate(1024, e.s1)
			must(t, e.z.Use(p+2048, 8, e.s1, buf.Read))
		}, []sanitize.Kind{sanitize.UseAfterFree}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c collector
			o := c.opts()
			if tc.opts != nil {
				tc.opts(&o)
			}
			z := sanitize.New(o)
			up := newFakeRes()
			e := &env{z: z, res: z.Resource(up), up: up, s1: newFakeStream(), s2: newFakeStream(), s3: newFakeStream()}
			tc.run(t, e)
			got := c.kinds()
			if len(got) != len(tc.expect) {
				t.Fatalf("reports %v, want %v", c.reps, tc.expect)
			}
			for i := range got {
				if got[i] != tc.expect[i] {
					t.Fatalf("reports %v, want %v", got, tc.expect)
				}
			}
			if z.Count() != len(tc.expect) {
				t.Fatalf("Count = %d, want %d", z.Count(), len(tc.expect))
			}
		})
	}
}

// TestReportStacks checks that a report names the caller on both sides.
func TestReportStacks(t *testing.T) {
	var c collector
	z := sanitize.New(c.opts())
	res := z.Resource(newFakeRes())
	s1, s2 := newFakeStream(), newFakeStream()
	p := allocHere(t, res, s1)
	must(t, z.Use(p, 64, s2, buf.Read))
	if len(c.reps) != 1 {
		t.Fatalf("got %d reports", len(c.reps))
	}
	r := c.reps[0]
	if len(r.This.Stack) == 0 || !strings.Contains(r.This.Stack[0].Function, "TestReportStacks") {
		t.Errorf("use stack starts at %v, want TestReportStacks", r.This.Stack)
	}
	if len(r.Other.Stack) == 0 || !strings.Contains(r.Other.Stack[0].Function, "allocHere") {
		t.Errorf("allocation stack starts at %v, want allocHere", r.Other.Stack)
	}
	d := r.Detail()
	for _, want := range []string{"TestReportStacks", "allocHere", "sanitizer_test.go", "allocation on stream"} {
		if !strings.Contains(d, want) {
			t.Errorf("Detail lacks %q:\n%s", want, d)
		}
	}
	if r.This.Stream != s2.ID() || r.Other.Stream != s1.ID() || r.Alloc != p || r.AllocSize != 64 {
		t.Errorf("report fields %+v", r)
	}
}

func allocHere(t *testing.T, res *sanitize.Resource, s gpu.Stream) gpu.DevicePtr {
	p, err := res.Allocate(64, s)
	must(t, err)
	return p
}

// TestRefuse checks the error mode: the reported operation is not made.
func TestRefuse(t *testing.T) {
	z := sanitize.New(sanitize.Options{StackDepth: -1})
	up := newFakeRes()
	res := z.Resource(up)
	s1, s2, s3 := newFakeStream(), newFakeStream(), newFakeStream()

	p, err := res.Allocate(256, s1)
	must(t, err)
	// A use on s2 is refused and not recorded: a later ordered use is
	// clean.
	err = z.Use(p, 256, s2, buf.Write)
	if !errors.Is(err, sanitize.UseBeforeAlloc) {
		t.Fatalf("use: %v, want UseBeforeAlloc", err)
	}
	var rep *sanitize.Report
	if !errors.As(err, &rep) || rep.Alloc != p {
		t.Fatalf("error %v is not the report", err)
	}
	must(t, z.Synchronize(s1))
	must(t, z.Use(p, 256, s2, buf.Write))

	// A free on s3, unordered with the write on s2, is refused and does
	// not reach the upstream.
	err = res.Deallocate(p, 256, s3)
	if !errors.Is(err, sanitize.FreeBeforeUse) {
		t.Fatalf("free: %v, want FreeBeforeUse", err)
	}
	if up.frees != 0 || len(up.live) != 1 {
		t.Fatalf("refused free reached the upstream")
	}
	must(t, res.Deallocate(p, 256, s2))
	if up.frees != 1 {
		t.Fatalf("free did not reach the upstream")
	}

	// An early reuse is refused and the memory given back.
	s2.busy = true
	q, err := res.Allocate(256, s2)
	must(t, err)
	must(t, res.Deallocate(q, 256, s2))
	up.reuse = append(up.reuse, q)
	_, err = res.Allocate(256, s3)
	if !errors.Is(err, sanitize.ReuseBeforeFree) {
		t.Fatalf("allocate: %v, want ReuseBeforeFree", err)
	}
	if len(up.live) != 0 {
		t.Fatalf("refused allocation not given back: %v", up.live)
	}
	if z.Count() != 3 {
		t.Fatalf("Count = %d, want 3", z.Count())
	}
}

// TestBadInput checks the raw API's argument errors.
func TestBadInput(t *testing.T) {
	z := sanitize.New(sanitize.Options{})
	s := newFakeStream()
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"use nil stream", z.Use(1, 1, nil, buf.Read), gpu.ErrInvalidHandle},
		{"use bad access", z.Use(1, 1, s, buf.Access(7)), buf.ErrAccess},
		{"use negative size", z.Use(1, -1, s, buf.Read), gpu.ErrInvalidValue},
		{"synchronize nil", z.Synchronize(nil), gpu.ErrInvalidHandle},
		{"synchronize nil event", z.SynchronizeEvent(nil), gpu.ErrInvalidHandle},
		{"synchronize nil device", z.SynchronizeDevice(nil), gpu.ErrInvalidHandle},
		{"record nil", z.RecordEvent(nil, s), gpu.ErrInvalidHandle},
		{"wait nil", z.WaitEvent(s, nil), gpu.ErrInvalidHandle},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	var res sanitize.Resource
	if _, err := res.Allocate(1, s); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("allocate on zero Resource: %v", err)
	}
	if err := res.Deallocate(1, 1, s); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("deallocate on zero Resource: %v", err)
	}
	// A zero Resource given to buffers as their observer refuses uses
	// instead of dereferencing its missing sanitizer.
	if err := res.ObserveUse(1, 1, s, buf.Read); !errors.Is(err, gpu.ErrInvalidHandle) {
		t.Errorf("observe use on zero Resource: %v", err)
	}
	res.ObserveRecord(&fakeEvent{}, s)
	res.ObserveWait(s, &fakeEvent{})
}
