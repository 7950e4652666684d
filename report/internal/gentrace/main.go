// Command gentrace writes a synthetic RMM log of a training loop, for
// measuring the replay viewer on a large trace (scripts/html-check.sh
// --large): n events on two streams, deterministic.
//
// Each iteration allocates activations on the compute stream (sizes from
// a few KiB to tens of MiB, growing through the "forward" pass), frees
// them in reverse order in the "backward" pass with gradient buffers
// allocated and freed in between, and every fourth iteration hands a
// buffer to the copy stream, which frees it there (a cross-stream free).
// Weights and optimizer state (a few hundred blocks) live throughout.
// Times advance by 1-40 µs per event.
//
//	go run ./report/internal/gentrace -n 1000000 > big.csv
//
// With -live it writes a trace/tracegen Churn log instead, for replay at
// scale: a ramp to that many live blocks on -streams streams, random
// churn, a drain (sizes -min to -max bytes, log-uniform):
//
//	go run ./report/internal/gentrace -n 10000000 -live 200000 -streams 10000 > scale.csv
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"time"

	"github.com/streamalloc/streamalloc/trace/tracegen"
)

func main() {
	n := flag.Int("n", 1_000_000, "events to write")
	live := flag.Int("live", 0, "write a churn log with this many blocks live at the peak")
	streams := flag.Int("streams", 1, "streams of a churn log")
	minSize := flag.Int64("min", 256, "smallest block of a churn log")
	maxSize := flag.Int64("max", 64<<10, "largest block of a churn log")
	cross := flag.Int("cross", 100, "one free in this many on another stream in a churn log (0: none)")
	flag.Parse()
	w := bufio.NewWriterSize(os.Stdout, 1<<20)
	defer w.Flush()
	if *live > 0 {
		src, err := tracegen.Churn(tracegen.Config{Events: *n, Live: *live, Streams: *streams,
			MinSize: *minSize, MaxSize: *maxSize, CrossEvery: *cross, Seed: 1})
		if err != nil {
			fmt.Fprintln(os.Stderr, "gentrace:", err)
			os.Exit(2)
		}
		if _, err := io.Copy(w, src); err != nil {
			fmt.Fprintln(os.Stderr, "gentrace:", err)
			os.Exit(1)
		}
		return
	}
	rng := rand.New(rand.NewPCG(18, 2026))
	const compute, copyStream = 0x0, 0x7f3a2c001200
	t := 10 * time.Hour
	next := uint64(0x7f0000000000)
	events := 0
	emit := func(action string, ptr uint64, size int64, stream uint64) {
		t += time.Duration(1+rng.IntN(40)) * time.Microsecond
		h, m, s := int(t.Hours()), int(t.Minutes())%60, t-t.Truncate(time.Minute)
		fmt.Fprintf(w, "1,%02d:%02d:%09.6f,%s,%#x,%d,%#x\n", h, m, s.Seconds(), action, ptr, size, stream)
		events++
	}
	alloc := func(size int64, stream uint64) uint64 {
		p := next
		next += uint64((size + 511) &^ 511)
		emit("allocate", p, size, stream)
		return p
	}
	fmt.Fprintln(w, "Thread,Time,Action,Pointer,Size,Stream")
	type blk struct {
		p    uint64
		size int64
	}
	for range 300 { // weights and optimizer state
		alloc(int64(64<<10+rng.IntN(4<<20)), compute)
	}
	for it := 0; events < *n; it++ {
		var acts []blk
		layers := 40 + rng.IntN(20)
		for l := 0; l < layers && events < *n; l++ {
			size := int64(8<<10 + rng.IntN(1<<20+l*(512<<10)))
			acts = append(acts, blk{alloc(size, compute), size})
			tmp := int64(4<<10 + rng.IntN(256<<10))
			p := alloc(tmp, compute)
			emit("free", p, tmp, compute)
		}
		for l := len(acts) - 1; l >= 0 && events < *n; l-- {
			g := int64(16<<10 + rng.IntN(2<<20))
			gp := alloc(g, compute)
			stream := uint64(compute)
			if it%4 == 0 && l == len(acts)/2 {
				stream = copyStream
			}
			emit("free", acts[l].p, acts[l].size, stream)
			emit("free", gp, g, compute)
		}
	}
}
