package mr_test

import (
	"runtime"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

// TestArenaReleaseManyStreams: an arena used by thousands of streams
// releases its superblocks, each on the stream that returned it, without
// the host memory growing with the square of the streams. Release asks
// each stream whether it was destroyed; asking with Query made the host
// observe each idle stream, which grows the simulator's host clock by one
// stream each time, and every stream freeing a superblock afterwards kept
// a copy of it: about 80 KB per stream at 10,000 streams (an arena's
// replay of a 10,000-stream trace peaked at 780 MiB of host memory). The
// bound here is 8 KB per stream retained after Release.
func TestArenaReleaseManyStreams(t *testing.T) {
	const n = 3000
	dev := resDevice(t, sim.Config{})
	up, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	a, err := mr.NewArena(up, mr.ArenaOptions{SuperblockSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	streams := make([]gpu.Stream, n)
	for i := range streams {
		s, err := dev.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Destroy()
		streams[i] = s
		p, err := a.Allocate(4096, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Deallocate(p, 4096, s); err != nil {
			t.Fatal(err)
		}
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	grew := int64(ms.HeapAlloc) - int64(before)
	if grew > 8<<10*n {
		t.Errorf("Release over %d streams grew the heap by %d bytes, %d per stream; want at most 8 KB each", n, grew, grew/n)
	}
	if u := a.Usage(); u.Reserved != 0 {
		t.Errorf("%d bytes reserved after Release", u.Reserved)
	}
	t.Logf("Release over %d streams: heap %+d bytes (%d per stream)", n, grew, grew/n)
	runtime.KeepAlive(streams)
}
