package osthread

import (
	"runtime"
	"testing"
)

// TestID checks that a locked goroutine sees one thread, and that two
// goroutines locked at the same time see two.
func TestID(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	a, ok := ID()
	if !ok {
		t.Skip("no thread IDs on " + runtime.GOOS)
	}
	if b, _ := ID(); a != b || a <= 0 {
		t.Fatalf("locked goroutine: IDs %d then %d, want one positive ID", a, b)
	}
	other := make(chan int)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		id, _ := ID()
		other <- id
	}()
	if b := <-other; b == a {
		t.Fatalf("two locked goroutines on thread %d", a)
	}
}
