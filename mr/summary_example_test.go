package mr_test

import (
	"fmt"
	"os"

	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// The summary of a chain: each resource, nearest first, with what it
// holds and what it did, in IEC units. Here a Stats adaptor over the
// driver's stream-ordered pool.
func ExampleWriteSummary() {
	dev, _ := sim.New(sim.Config{Capacity: 8 << 30}).Device(0)
	s, _ := dev.NewStream()
	defer s.Destroy()

	async, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer async.Close()
	stats := mr.NewStats(async, mr.StatsOptions{})

	a, _ := stats.Allocate(3<<20, s)
	b, _ := stats.Allocate(1<<20, s)
	stats.Deallocate(a, 3<<20, s)
	mr.Reclaim(stats, true) // see the free completed

	if err := mr.WriteSummary(os.Stdout, stats); err != nil {
		fmt.Println(err)
	}
	fmt.Println()
	fmt.Println(mr.StatsOf(stats)) // the chain on one line
	fmt.Println(stats)             // any resource on one line
	stats.Deallocate(b, 1<<20, s)
	// Output:
	// streamalloc memory summary: device 0, Simulated H100 (simulated), 8.0 GiB total, 8.0 GiB free
	// chain: stats > async
	//
	// stats
	//                               current         peak        total
	//   live bytes                  1.0 MiB      4.0 MiB      4.0 MiB
	//   live allocations                  1            2            2
	//   refused: 0 allocations, 0 out of memory
	//
	// async
	//                               current         peak
	//   reserved                   32.0 MiB     32.0 MiB
	//   used                        1.0 MiB      4.0 MiB
	//   live 1.0 MiB in 1 allocation; pending frees 0 B in 0 frees
	//
	// stats > async: reserved 32.0 MiB (peak 32.0 MiB), used 1.0 MiB (peak 4.0 MiB)
	// stats: 1.0 MiB in 1 allocation (peak 4.0 MiB in 2; 4.0 MiB in 2 in all)
}
