package sim

import (
	"runtime"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// pingPong makes s1 and s2 wait on each other n times: every wait changes
// what is ordered before the waiting stream, one history entry each.
func pingPong(t *testing.T, d *Device, s1, s2 gpu.Stream, e1, e2 gpu.Event, n int) {
	t.Helper()
	for range n {
		for _, step := range []func() error{
			func() error { return e1.Record(s1) }, func() error { return s2.WaitEvent(e1) },
			func() error { return e2.Record(s2) }, func() error { return s1.WaitEvent(e2) },
		} {
			if err := step(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A stream remembers at most twice Config.History ordering changes, so a
// program of any length runs in bounded memory: the heap does not grow
// from 5,000 rounds of waits to 25,000. HappensBefore stays exact for
// recent operations and answers false for forgotten ones.
func TestHistoryBounded(t *testing.T) {
	const keep = 64
	dev, err := New(Config{History: keep}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	d := dev.(*Device)
	s1, _ := d.NewStream()
	s2, _ := d.NewStream()
	e1, _ := d.NewEvent(false)
	e2, _ := d.NewEvent(false)
	pingPong(t, d, s1, s2, e1, e2, 1)
	old := d.LastOp(s2) // ordered after s1's first record
	if !d.HappensBefore(OpID{s1.ID(), 1}, old) {
		t.Fatal("the first wait does not order s2 after s1")
	}
	var ms runtime.MemStats
	pingPong(t, d, s1, s2, e1, e2, 5000)
	d.Synchronize()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	pingPong(t, d, s1, s2, e1, e2, 20000)
	d.Synchronize()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	if grew := int64(ms.HeapAlloc) - int64(before); grew > 512<<10 {
		t.Errorf("heap grew by %d KiB over 20,000 rounds of waits", grew>>10)
	}
	for _, s := range []gpu.Stream{s1, s2} {
		st := s.(*stream)
		st.mu.Lock()
		n := len(st.hist)
		st.mu.Unlock()
		if n > 2*keep || n < keep {
			t.Errorf("stream %d keeps %d history entries, want %d to %d", s.ID(), n, keep, 2*keep)
		}
	}
	// Recent: exact, both ways.
	pingPong(t, d, s1, s2, e1, e2, 1)
	last1, last2 := d.LastOp(s1), d.LastOp(s2)
	if !d.HappensBefore(OpID{s2.ID(), last2.Seq() - 1}, last1) || d.HappensBefore(last1, last2) {
		t.Error("HappensBefore wrong for recent operations")
	}
	// Forgotten: false, never a guess.
	if d.HappensBefore(OpID{s1.ID(), 1}, old) {
		t.Error("HappensBefore answered for an operation older than the history")
	}
}

// A destroyed stream that has drained keeps only its last clock.
func TestHistoryOfDestroyedStream(t *testing.T) {
	dev, err := New(Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	d := dev.(*Device)
	s1, _ := d.NewStream()
	s2, _ := d.NewStream()
	e1, _ := d.NewEvent(false)
	e2, _ := d.NewEvent(false)
	pingPong(t, d, s1, s2, e1, e2, 50)
	last := d.LastOp(s2)
	if err := s2.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
	st := s2.(*stream)
	st.mu.Lock()
	n := len(st.hist)
	st.mu.Unlock()
	if n != 1 {
		t.Errorf("destroyed stream keeps %d history entries, want 1", n)
	}
	if !d.HappensBefore(OpID{s1.ID(), 1}, last) {
		t.Error("the destroyed stream's last operation lost its ordering")
	}
}
