// Command vlayout replays traces on a Pool over Virtual (as the registry's
// pool_vmm builds it, Virtual waiting for decommits, so the replay is
// deterministic, but with SmallAtPeak only under -peak)
// on the simulator, takes the pool's Layout at each new peak of reserved
// bytes, and prints where the bytes beyond the live ones lie at the last
// such peak: per stream, its small chunks and each run of mapped memory
// of its growable ranges, with the free bytes in the run's partial
// granules (BENCHMARKS.md, "Small requests at a peak", uses it).
//
// A run is printed as its blocks, in MiB: L live, F free, P pending,
// C cached, with | before a block that starts on a 2 MiB granule
// boundary and ~N after one that crosses N of them.
//
// With -perturb SEED it replays the trace without about 1 in 64 of its
// small requests and their frees (dropSmall): the pool's figures move
// with any change of where blocks land, so a placement rule's gain on
// one trace says little until it holds on such neighbours of the trace
// too; -quiet prints one line per trace, the trace, the seed and the
// ratio.
//
//	go run ./scripts/vlayout [-holes [-pair]] [-peak] [-blocks] [-steps] TRACE...
//	go run ./scripts/vlayout -quiet [-holes [-pair]] [-peak] -perturb SEED TRACE...
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/backend"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/replay"
	"github.com/streamalloc/streamalloc/trace"
	_ "github.com/streamalloc/streamalloc/trace/torchsnap" // PyTorch snapshots for trace.Open
)

const mib = 1 << 20

func main() {
	holes := flag.Bool("holes", false, "PoolOptions.PackHoles (the registry's pool_vmm_holes)")
	peak := flag.Bool("peak", false, "PoolOptions.SmallAtPeak")
	pair := flag.Bool("pair", false, "PoolOptions.HolesKeepPair (with -holes; -holes -pair -peak is the registry's pool_vmm_holes_pair)")
	blocks := flag.Bool("blocks", false, "print every run's blocks")
	steps := flag.Bool("steps", false, "print each new peak of reserved bytes")
	perturb := flag.Uint64("perturb", 0, "if not 0, the seed of a perturbation: drop about 1 in 64 small requests (at most 256 KiB) and their frees")
	quiet := flag.Bool("quiet", false, "print the ratio alone, one line per trace")
	flag.Parse()
	for _, file := range flag.Args() {
		if err := run(file, mr.PoolOptions{PackHoles: *holes, HolesKeepPair: *pair, SmallAtPeak: *peak}, *blocks, *steps, *perturb, *quiet); err != nil {
			fmt.Fprintln(os.Stderr, "vlayout:", err)
			os.Exit(1)
		}
	}
}

// peakWatch is the pool, with a copy of its layout taken whenever an
// allocation raises its reserved bytes above every earlier moment.
type peakWatch struct {
	*mr.Pool
	peak   uint64
	used   uint64
	layout mr.PoolLayout
	steps  bool
	n      int
}

func (w *peakWatch) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	p, err := w.Pool.Allocate(size, s)
	if u := w.Pool.Usage(); u.Reserved > w.peak {
		w.peak, w.used, w.layout = u.Reserved, u.Used, w.Pool.Layout()
		w.n++
		if w.steps {
			fmt.Printf("  peak %d: reserved %.2f MiB, used %.2f MiB, beyond %.2f MiB\n",
				w.n, float64(u.Reserved)/mib, float64(u.Used)/mib, float64(u.Reserved-u.Used)/mib)
		}
	}
	return p, err
}

func run(file string, opts mr.PoolOptions, blocks, steps bool, perturb uint64, quiet bool) error {
	b, err := backend.Open("sim")
	if err != nil {
		return err
	}
	dev, err := b.Device(0)
	if err != nil {
		return err
	}
	v, err := mr.NewVirtual(dev, mr.VirtualOptions{WaitForDecommits: true})
	if err != nil {
		return err
	}
	defer v.Close()
	p, err := mr.NewPool(v, opts)
	if err != nil {
		return err
	}
	defer p.Close()
	f, err := trace.Open(file, nil)
	if err != nil {
		return err
	}
	defer f.Close()
	var tr trace.Reader = f
	if perturb != 0 {
		tr = &dropSmall{Reader: f, seed: perturb, dropped: map[uint64]bool{}}
	}
	if !quiet {
		fmt.Println(file)
	}
	w := &peakWatch{Pool: p, steps: steps}
	r, err := replay.Run(context.Background(), tr, dev, w, replay.Options{Resource: "pool_vmm"})
	if err != nil {
		return err
	}
	live := uint64(r.PeakLiveBytes)
	if quiet {
		fmt.Printf("%s %d %.4f\n", file, perturb, float64(w.peak)/float64(live))
		return nil
	}
	fmt.Printf("  peak live %.2f MiB, peak reserved %.2f MiB (%.4f; 1.01 allows %.2f MiB), %d peaks; at the last: used %.2f MiB, beyond used %.2f MiB\n",
		float64(live)/mib, float64(w.peak)/mib, float64(w.peak)/float64(live), float64(live)*1.01/mib,
		w.n, float64(w.used)/mib, float64(w.peak-w.used)/mib)
	st := p.Stats()
	fmt.Printf("  commits %d, decommits %d, chunks allocated %d (small, fixed and growable), small requests at the peak %d\n",
		st.InPlaceGrowths, st.Decommits, st.Growths, st.SmallAtPeak)
	report(w.layout, blocks)
	return nil
}

// dropSmall is a trace without about 1 in 64 of its small requests (the
// choice a hash of the request's address, line and seed), and without
// their frees: a trace of the same workload that differs by a few KiB of
// live bytes, to tell a placement rule's gains that hold from those that
// a small change of the request stream undoes.
type dropSmall struct {
	trace.Reader
	seed    uint64
	dropped map[uint64]bool
}

func (d *dropSmall) Next() (trace.Event, error) {
	for {
		ev, err := d.Reader.Next()
		if err != nil {
			return ev, err
		}
		switch ev.Op {
		case trace.Alloc:
			h := (ev.Ptr ^ uint64(ev.Line)*0x9e3779b97f4a7c15 ^ d.seed*0xbf58476d1ce4e5b9) * 0x94d049bb133111eb
			if ev.Size <= 256<<10 && h>>58 == 0 {
				d.dropped[ev.Ptr] = true
				continue
			}
		case trace.Free:
			if d.dropped[ev.Ptr] {
				delete(d.dropped, ev.Ptr)
				continue
			}
		}
		return ev, nil
	}
}

const gran = 2 * mib

func report(l mr.PoolLayout, blocks bool) {
	type streamSum struct {
		small, smallLive, runs, mapped, live, partialFree, wholeFree, notLive int
	}
	sums := map[uint64]*streamSum{}
	var order []uint64
	for _, c := range l.Chunks {
		s := sums[c.Stream]
		if s == nil {
			s = &streamSum{}
			sums[c.Stream] = s
			order = append(order, c.Stream)
		}
		liveB := 0
		for _, b := range c.Blocks {
			if b.State == mr.BlockLive {
				liveB += b.Requested
			}
		}
		if c.Small {
			s.small++
			s.smallLive += liveB
			continue
		}
		s.runs++
		s.mapped += c.Size
		s.live += liveB
		// Free bytes per granule of the run.
		base := uint64(c.Base)
		ng := (c.Size + gran - 1) / gran
		freeIn := make([]int, ng)
		for _, b := range c.Blocks {
			if b.State == mr.BlockLive {
				s.notLive += b.Size - b.Requested
				continue
			}
			s.notLive += b.Size
			for a := uint64(b.Ptr); a < uint64(b.Ptr)+uint64(b.Size); {
				g := (a - base) / gran
				end := min(base+(g+1)*gran, uint64(b.Ptr)+uint64(b.Size))
				freeIn[g] += int(end - a)
				a = end
			}
		}
		for _, f := range freeIn {
			if f == gran {
				s.wholeFree += f
			} else {
				s.partialFree += f
			}
		}
		if blocks {
			fmt.Printf("    stream %d run @%.2f MiB %.2f MiB live %.2f: %s\n", c.Stream,
				float64(base%(1<<40))/mib, float64(c.Size)/mib, float64(liveB)/mib, runString(c))
		}
	}
	for _, id := range order {
		s := sums[id]
		fmt.Printf("  stream %d: small chunks %d (live %.2f MiB), runs %d mapping %.2f MiB for %.2f live: not live %.2f MiB (in partial granules %.2f, whole free granules %.2f)\n",
			id, s.small, float64(s.smallLive)/mib, s.runs, float64(s.mapped)/mib, float64(s.live)/mib,
			float64(s.notLive)/mib, float64(s.partialFree)/mib, float64(s.wholeFree)/mib)
	}
}

func runString(c mr.ChunkLayout) string {
	var sb strings.Builder
	base := uint64(c.Base)
	for _, b := range c.Blocks {
		st := "?"
		switch b.State {
		case mr.BlockLive:
			st = "L"
		case mr.BlockFree:
			st = "F"
		case mr.BlockPending:
			st = "P"
		case mr.BlockCached:
			st = "C"
		}
		off := uint64(b.Ptr) - base
		if off > 0 && off%gran == 0 {
			sb.WriteString("| ")
		}
		// A block that crosses granule boundaries: how many, after ~.
		cross := (off+uint64(b.Size)-1)/gran - off/gran
		if cross > 0 {
			fmt.Fprintf(&sb, "%s%.4g~%d ", st, float64(b.Size)/mib, cross)
		} else {
			fmt.Fprintf(&sb, "%s%.4g ", st, float64(b.Size)/mib)
		}
	}
	return sb.String()
}
