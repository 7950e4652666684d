package mr_test

import (
	"errors"
	"fmt"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// Adaptors over a pool keep no pointer table: the pool records which
// adaptor each allocation belongs to and refuses a free through another,
// or of the pool's own memory, as an unknown pointer, and nothing is
// counted for it.
func ExampleOwnedResource() {
	dev, _ := sim.New(sim.Config{}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()
	pool, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	st := mr.NewStats(pool, mr.StatsOptions{})
	fmt.Println("stats checks owners:", st.OwnersChecked())

	p, _ := st.Allocate(1000, s)
	q, _ := pool.Allocate(1000, s) // the pool's own, not the adaptor's
	err = st.Deallocate(q, 1000, s)
	fmt.Println("free of the pool's memory through Stats:", errors.Is(err, mr.ErrUnknownPointer))
	err = pool.Deallocate(p, 1000, s)
	fmt.Println("free of Stats' memory on the pool:", errors.Is(err, mr.ErrUnknownPointer))
	fmt.Println("live through Stats:", st.Snapshot().Allocations.Current)

	st.Deallocate(p, 1000, s)
	pool.Deallocate(q, 1000, s)
	fmt.Println("live through Stats:", st.Snapshot().Allocations.Current)
	// Output:
	// stats checks owners: true
	// free of the pool's memory through Stats: true
	// free of Stats' memory on the pool: true
	// live through Stats: 1
	// live through Stats: 0
}
