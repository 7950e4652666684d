package pluggable_test

import (
	"fmt"

	"github.com/streamalloc/streamalloc/pluggable"
)

// The calls the C ABI makes for a host: configure, allocate on the host's
// stream (0 is the legacy default stream), read the statistics, free.
func Example() {
	a := pluggable.New()
	if err := a.Configure("pool,backend=sim,release_threshold=64MiB"); err != nil {
		fmt.Println(err)
		return
	}
	p := a.Alloc(1<<20, 0, 0)
	if p == 0 {
		fmt.Println(a.LastError())
		return
	}
	st, _ := a.Stats(0)
	fmt.Printf("live %d bytes in %d allocation(s); reserved covers it: %v\n", st.Live, st.LiveAllocs, st.Reserved >= st.Live)
	fmt.Println("free:", a.Free(p, 1<<20, 0, 0))
	fmt.Println("bad free counted:", a.Free(p, 1<<20, 0, 0) != nil)
	st, _ = a.Stats(0)
	fmt.Printf("live %d, peak %d, bad frees %d\n", st.Live, st.PeakLive, st.BadFrees)
	// Output:
	// live 1048576 bytes in 1 allocation(s); reserved covers it: true
	// free: <nil>
	// bad free counted: true
	// live 0, peak 1048576, bad frees 1
}
