package mr_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

func TestLimitSharedBudget(t *testing.T) {
	b := mr.NewBudget(4096)
	// Two resources on two devices share the budget.
	up1, up2 := newRecording(), newRecording()
	l1, l2 := mr.NewLimit(up1, b), mr.NewLimit(up2, b)
	s1, s2 := up1.stream(), up2.stream()

	p1, err := l1.Allocate(1000, s1) // charged 1024
	if err != nil {
		t.Fatal(err)
	}
	p2, err := l2.Allocate(3072, s2)
	if err != nil {
		t.Fatal(err)
	}
	if b.Used() != 4096 || l1.Used() != 1024 || l2.Used() != 3072 {
		t.Fatalf("used %d (%d + %d)", b.Used(), l1.Used(), l2.Used())
	}
	calls := up1.numCalls()
	_, err = l1.Allocate(1, s1)
	var oom *mr.OutOfMemoryError
	if !errors.Is(err, mr.ErrOutOfMemory) || !errors.As(err, &oom) {
		t.Fatalf("over budget: %v", err)
	}
	if oom.Limit != 4096 || oom.Requested != 1 || oom.Reserved != 4096 || oom.Used != 1024 || oom.Resource != "limit" {
		t.Errorf("error fields %+v", oom)
	}
	want := fmt.Sprintf("limit: out of memory: 1 B (1 bytes) requested on stream %d; reserved 4.0 KiB, used 1.0 KiB, "+
		"limit 4.0 KiB: over the budget of 4.0 KiB: 4.0 KiB in use, 256 B more do not fit", s1.ID())
	if err.Error() != want {
		t.Errorf("message\n%s\nwant\n%s", err, want)
	}
	if up1.numCalls() != calls {
		t.Error("an over-budget request reached the upstream")
	}
	// Freeing on one device makes room on the other.
	if err := l2.Deallocate(p2, 3072, s2); err != nil {
		t.Fatal(err)
	}
	p3, err := l1.Allocate(3000, s1)
	if err != nil {
		t.Fatal(err)
	}
	if b.Used() != 4096 || b.Peak() != 4096 {
		t.Fatalf("used %d peak %d", b.Used(), b.Peak())
	}
	l1.Deallocate(p1, 1000, s1)
	l1.Deallocate(p3, 3000, s1)
	if b.Used() != 0 || l1.Used() != 0 {
		t.Fatalf("after freeing all: used %d, l1 %d", b.Used(), l1.Used())
	}
}

func TestLimitZeroBudget(t *testing.T) {
	up := newRecording()
	l := mr.NewLimit(up, mr.NewBudget(0))
	_, err := l.Allocate(1, up.stream())
	if !errors.Is(err, mr.ErrOutOfMemory) || !strings.Contains(err.Error(), "over the budget of 0 B: 0 B in use, 256 B more do not fit") {
		t.Fatalf("zero budget: %v", err)
	}
	// The null allocation needs no budget.
	if p, err := l.Allocate(0, up.stream()); p != 0 || err != nil {
		t.Fatalf("Allocate(0) = %#x, %v", p, err)
	}
}

func TestLimitHugeRequest(t *testing.T) {
	up := newRecording()
	l := mr.NewLimit(up, mr.NewBudget(^uint64(0)))
	if _, err := l.Allocate(int(^uint(0)>>1), up.stream()); !errors.Is(err, mr.ErrOutOfMemory) {
		t.Fatalf("MaxInt bytes: %v", err)
	}
	if l.Budget().Used() != 0 || up.numCalls() != 0 {
		t.Fatal("a request that cannot be charged was counted or passed on")
	}
}

func TestLimitRefundsUpstreamFailure(t *testing.T) {
	up := newRecording()
	b := mr.NewBudget(1 << 20)
	l := mr.NewLimit(up, b)
	up.failAllocs(fmt.Errorf("injected: %w", gpu.ErrOutOfMemory))
	if _, err := l.Allocate(4096, up.stream()); !errors.Is(err, mr.ErrOutOfMemory) {
		t.Fatal(err)
	}
	if b.Used() != 0 || l.Used() != 0 {
		t.Fatalf("failed request left %d charged", b.Used())
	}
}

// TestLimitConcurrent: many goroutines on several adaptors never take the
// budget over its limit, and give everything back.
func TestLimitConcurrent(t *testing.T) {
	const limit = 64 << 10
	b := mr.NewBudget(limit)
	var wg sync.WaitGroup
	for g := range 8 {
		up := newRecording()
		l := mr.NewLimit(up, b)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := up.stream()
			var held []int
			var ptrs []gpu.DevicePtr
			for i := range 300 {
				size := 256 * (1 + (g*31+i*17)%40)
				p, err := l.Allocate(size, s)
				switch {
				case err == nil:
					held, ptrs = append(held, size), append(ptrs, p)
				case !errors.Is(err, mr.ErrOutOfMemory):
					t.Error(err)
					return
				}
				if b.Used() > limit {
					t.Errorf("budget used %d over %d", b.Used(), limit)
				}
				if len(held) > 3 || err != nil {
					for j := range held {
						if err := l.Deallocate(ptrs[j], held[j], s); err != nil {
							t.Error(err)
						}
					}
					held, ptrs = held[:0], ptrs[:0]
				}
			}
			for j := range held {
				l.Deallocate(ptrs[j], held[j], s)
			}
		}()
	}
	wg.Wait()
	if b.Used() != 0 || b.Peak() > limit {
		t.Fatalf("used %d, peak %d", b.Used(), b.Peak())
	}
}

// TestLimitBudgetSharedLater: a Limit that had its budget alone keeps its
// used bytes exact when a second Limit is made over the budget while it
// holds memory, and through frees on both sides afterwards.
func TestLimitBudgetSharedLater(t *testing.T) {
	b := mr.NewBudget(1 << 20)
	up1, up2 := newRecording(), newRecording()
	s1, s2 := up1.stream(), up2.stream()
	l1 := mr.NewLimit(up1, b)
	p1, err := l1.Allocate(1000, s1) // charged 1024
	if err != nil {
		t.Fatal(err)
	}
	if l1.Used() != 1024 || b.Used() != 1024 {
		t.Fatalf("alone: l1 %d, budget %d", l1.Used(), b.Used())
	}
	l2 := mr.NewLimit(up2, b)
	if l1.Used() != 1024 || l2.Used() != 0 || b.Used() != 1024 {
		t.Fatalf("shared: l1 %d, l2 %d, budget %d", l1.Used(), l2.Used(), b.Used())
	}
	p2, err := l2.Allocate(256, s2)
	if err != nil {
		t.Fatal(err)
	}
	p3, err := l1.Allocate(512, s1)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		l          *mr.Limit
		p          gpu.DevicePtr
		size       int
		s          gpu.Stream
		u1, u2, ub uint64
	}{
		{nil, 0, 0, nil, 1536, 256, 1792},
		{l1, p1, 1000, s1, 512, 256, 768}, // charged before the budget was shared
		{l2, p2, 256, s2, 512, 0, 512},
		{l1, p3, 512, s1, 0, 0, 0},
	}
	for i, st := range steps {
		if st.l != nil {
			if err := st.l.Deallocate(st.p, st.size, st.s); err != nil {
				t.Fatal(err)
			}
		}
		if l1.Used() != st.u1 || l2.Used() != st.u2 || b.Used() != st.ub {
			t.Fatalf("step %d: l1 %d, l2 %d, budget %d; want %d, %d, %d", i,
				l1.Used(), l2.Used(), b.Used(), st.u1, st.u2, st.ub)
		}
	}
	if b.Peak() != 1792 {
		t.Errorf("peak %d, want 1792", b.Peak())
	}
	// A budget of the largest limit (past what a budget's word can hold)
	// counts as any other once shared.
	huge := mr.NewBudget(^uint64(0))
	up3 := newRecording()
	l3, l4 := mr.NewLimit(up3, huge), mr.NewLimit(newRecording(), huge)
	if _, err := l3.Allocate(1024, up3.stream()); err != nil {
		t.Fatal(err)
	}
	if l3.Used() != 1024 || l4.Used() != 0 || huge.Used() != 1024 {
		t.Fatalf("huge budget: l3 %d, l4 %d, budget %d", l3.Used(), l4.Used(), huge.Used())
	}
}

// TestLimitBudgetSharedWhileBusy: Limits made over a budget while the
// first one allocates and frees on another goroutine leave every Limit's
// used bytes at zero once everything is freed.
func TestLimitBudgetSharedWhileBusy(t *testing.T) {
	b := mr.NewBudget(1 << 30)
	up := newRecording()
	first := mr.NewLimit(up, b)
	var wg sync.WaitGroup
	run := func(l *mr.Limit, up *recordingResource) {
		defer wg.Done()
		s := up.stream()
		for i := range 2000 {
			size := 256 * (1 + i%7)
			p, err := l.Allocate(size, s)
			if err != nil {
				t.Error(err)
				return
			}
			if err := l.Deallocate(p, size, s); err != nil {
				t.Error(err)
				return
			}
		}
	}
	wg.Add(1)
	go run(first, up)
	limits := []*mr.Limit{first}
	for range 4 {
		up := newRecording()
		l := mr.NewLimit(up, b)
		limits = append(limits, l)
		wg.Add(1)
		go run(l, up)
	}
	wg.Wait()
	for i, l := range limits {
		if l.Used() != 0 {
			t.Errorf("limit %d: used %d after freeing everything", i, l.Used())
		}
	}
	if b.Used() != 0 {
		t.Errorf("budget used %d after freeing everything", b.Used())
	}
}

// gatedResource is an upstream whose Allocate, once armed, tells entered
// and waits for proceed before it answers: a call held in flight.
type gatedResource struct {
	*recordingResource
	entered, proceed chan struct{}
}

func (g *gatedResource) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	g.entered <- struct{}{}
	<-g.proceed
	return g.recordingResource.Allocate(size, s)
}

// TestLimitBudgetSharedInFlight: a second Limit made over the budget while
// the first one's allocation is charged but not yet answered by the
// upstream counts that allocation as the first Limit's; if the upstream
// then refuses it, the refund after the switch takes it back, and if it
// grants it, its free does.
func TestLimitBudgetSharedInFlight(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("upstream fails %v", fail), func(t *testing.T) {
			b := mr.NewBudget(1 << 20)
			up := &gatedResource{newRecording(), make(chan struct{}), make(chan struct{})}
			if fail {
				up.failAllocs(errFake)
			}
			s := up.stream()
			l1 := mr.NewLimit(up, b)
			type result struct {
				p   gpu.DevicePtr
				err error
			}
			done := make(chan result)
			go func() {
				p, err := l1.Allocate(1000, s) // charged 1024
				done <- result{p, err}
			}()
			<-up.entered
			if l1.Used() != 1024 || b.Used() != 1024 {
				t.Errorf("in flight, alone: l1 %d, budget %d; want 1024, 1024", l1.Used(), b.Used())
			}
			l2 := mr.NewLimit(newRecording(), b)
			if l1.Used() != 1024 || l2.Used() != 0 || b.Used() != 1024 {
				t.Errorf("in flight, shared: l1 %d, l2 %d, budget %d; want 1024, 0, 1024", l1.Used(), l2.Used(), b.Used())
			}
			close(up.proceed)
			r := <-done
			if fail {
				if !errors.Is(r.err, errFake) {
					t.Fatalf("Allocate: %v, want the upstream's error", r.err)
				}
				if l1.Used() != 0 || b.Used() != 0 {
					t.Errorf("refused: l1 %d, budget %d; want 0, 0", l1.Used(), b.Used())
				}
				return
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
			if l1.Used() != 1024 || b.Used() != 1024 {
				t.Errorf("granted: l1 %d, budget %d; want 1024, 1024", l1.Used(), b.Used())
			}
			if err := l1.Deallocate(r.p, 1000, s); err != nil {
				t.Fatal(err)
			}
			if l1.Used() != 0 || l2.Used() != 0 || b.Used() != 0 {
				t.Errorf("freed: l1 %d, l2 %d, budget %d; want 0", l1.Used(), l2.Used(), b.Used())
			}
		})
	}
}

// TestLimitOverPoolUnderPeak checks the hot path over a pool: a request
// under the budget's peak is charged before the pool checks its stream,
// and a nil stream or another device's is still refused with its exact
// error and leaves the budget, the adaptor's used bytes and the peak as
// they were; a request that does fit is served, and one over the budget
// fails without reaching the pool, whatever the peak.
func TestLimitOverPoolUnderPeak(t *testing.T) {
	pool, s := newOwnedPool(t)
	b := mr.NewBudget(8192)
	l := mr.NewLimit(pool, b)
	p, err := l.Allocate(4096, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Deallocate(p, 4096, s); err != nil {
		t.Fatal(err)
	}
	if b.Used() != 0 || b.Peak() != 4096 {
		t.Fatalf("used %d, peak %d after a pair of 4 KiB", b.Used(), b.Peak())
	}
	other := newFakeStream(&fakeDevice{})
	for _, c := range []struct {
		name string
		s    gpu.Stream
		want error
	}{
		{"nil stream", nil, gpu.ErrInvalidHandle},
		{"another device's stream", other, gpu.ErrWrongDevice},
	} {
		if _, err := l.Allocate(1024, c.s); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if b.Used() != 0 || l.Used() != 0 || b.Peak() != 4096 || pool.Usage().Used != 0 {
			t.Errorf("%s: used %d (adaptor %d), peak %d, the pool's used %d; want 0, 0, 4096, 0",
				c.name, b.Used(), l.Used(), b.Peak(), pool.Usage().Used)
		}
	}
	q, err := l.Allocate(1024, s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allocate(8192, s); !errors.Is(err, mr.ErrOutOfMemory) {
		t.Errorf("over the budget: %v, want ErrOutOfMemory", err)
	}
	if b.Used() != 1024 || b.Peak() != 4096 || pool.Usage().Used != 1024 {
		t.Errorf("used %d, peak %d, the pool's used %d; want 1024, 4096, 1024", b.Used(), b.Peak(), pool.Usage().Used)
	}
	if err := l.Deallocate(q, 1024, s); err != nil {
		t.Fatal(err)
	}
	if b.Used() != 0 || l.Used() != 0 {
		t.Errorf("used %d (adaptor %d) after every free", b.Used(), l.Used())
	}
}
