// Command poolprobe measures what the driver's stream-ordered pool does,
// so that the simulator's model of it (gpu/sim/pool.go) can be checked
// rule by rule against the card. It runs the same probes on any backend
// (-device cuda or sim) and prints one line per observation, so the two
// outputs can be compared with diff.
//
// Probes (each on a fresh pool of its own, release threshold 0 unless
// stated, reuse policies as the driver sets them):
//
//	grow     reserved after one allocation of each size: the growth granularity
//	seq      addresses and reserved over runs of allocations: whether growths
//	         are mapped next to each other and one block spans two
//	fit      which free hole a request takes: best fit, first fit, or neither
//	release  reserved after a free, then after each kind of synchronization
//	trim     what cuMemPoolTrimTo gives back of a growth that is partly used
//	reuse    cross-stream reuse under each reuse policy, with the freeing
//	         stream busy and idle
//	small    the spacing of small blocks
//	move     whether a growth maps new memory or moves idle granules
//
// With -trace FILE... it replays each trace on a pool of its own, one
// stream per trace stream, and prints after every event the address
// returned (as an offset from the pool's first block) and the pool's
// reserved bytes, then the peak reserved over peak live.
//
// Usage:
//
//	go run ./scripts/poolprobe -device sim
//	go run ./scripts/poolprobe -device sim -trace replay/testdata/*.csv.gz
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/backend"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/trace"
	_ "github.com/streamalloc/streamalloc/trace/torchsnap" // PyTorch snapshots for trace.Open
)

const (
	kib = 1 << 10
	mib = 1 << 20
)

func main() {
	kind := flag.String("device", "sim", "backend: cuda or sim")
	traces := flag.Bool("trace", false, "replay the trace files named as arguments, printing every event")
	flag.Parse()
	b, err := backend.Open(*kind)
	if err != nil {
		fmt.Fprintln(os.Stderr, "poolprobe:", err)
		os.Exit(1)
	}
	dev, err := b.Device(0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "poolprobe:", err)
		os.Exit(1)
	}
	p := &prober{dev: dev, w: os.Stdout}
	if *traces {
		for _, path := range flag.Args() {
			if err := p.replay(path); err != nil {
				fmt.Fprintln(os.Stderr, "poolprobe:", err)
				os.Exit(1)
			}
		}
		return
	}
	for _, probe := range []struct {
		name string
		fn   func() error
	}{
		{"grow", p.grow}, {"seq", p.seq}, {"fit", p.fit}, {"release", p.release},
		{"trim", p.trim}, {"reuse", p.reuse}, {"small", p.small}, {"move", p.move},
	} {
		if err := probe.fn(); err != nil {
			fmt.Fprintf(os.Stderr, "poolprobe: %s: %v\n", probe.name, err)
			os.Exit(1)
		}
	}
}

type prober struct {
	dev gpu.Device
	w   io.Writer
}

// session is one fresh pool and the streams a probe uses.
type session struct {
	dev  gpu.Device
	pool gpu.MemPool
	s    []gpu.Stream
	base gpu.DevicePtr // the first address the pool returned
	err  error
}

func (p *prober) open(streams int) *session {
	x := &session{dev: p.dev}
	x.pool, x.err = p.dev.NewMemPool()
	for i := 0; i < streams && x.err == nil; i++ {
		var s gpu.Stream
		s, x.err = p.dev.NewStream()
		x.s = append(x.s, s)
	}
	return x
}

func (x *session) close() error {
	if x.err != nil {
		return x.err
	}
	if err := x.dev.Synchronize(); err != nil {
		return err
	}
	for _, s := range x.s {
		if err := s.Destroy(); err != nil {
			return err
		}
	}
	return x.pool.Destroy()
}

func (x *session) alloc(size int, s int) gpu.DevicePtr {
	if x.err != nil {
		return 0
	}
	var ptr gpu.DevicePtr
	ptr, x.err = x.dev.MallocFromPoolAsync(size, x.pool, x.s[s])
	if x.err != nil {
		x.err = fmt.Errorf("alloc %d: %w", size, x.err)
	}
	if x.base == 0 {
		x.base = ptr
	}
	return ptr
}

func (x *session) free(ptr gpu.DevicePtr, s int) {
	if x.err == nil {
		x.err = x.dev.FreeAsync(ptr, x.s[s])
	}
}

func (x *session) attr(a gpu.PoolAttr) uint64 {
	if x.err != nil {
		return 0
	}
	var v uint64
	v, x.err = x.pool.Attribute(a)
	return v
}

func (x *session) set(a gpu.PoolAttr, v uint64) {
	if x.err == nil {
		x.err = x.pool.SetAttribute(a, v)
	}
}

func (x *session) reserved() uint64 { return x.attr(gpu.PoolReservedMemCurrent) }

// off is ptr as a signed offset from the pool's first address, in KiB.
func (x *session) off(ptr gpu.DevicePtr) int64 { return (int64(ptr) - int64(x.base)) / kib }

func (x *session) do(err error) {
	if x.err == nil {
		x.err = err
	}
}

func (p *prober) printf(format string, a ...any) { fmt.Fprintf(p.w, format+"\n", a...) }

// grow: reserved after one allocation of each size on a fresh pool.
func (p *prober) grow() error {
	sizes := []int{1 * kib, 1 * mib, 2 * mib, 4 * mib, 30 * mib, 32 * mib, 33 * mib, 48 * mib, 64 * mib,
		65 * mib, 96 * mib, 100 * mib, 128 * mib, 129 * mib, 200 * mib, 256 * mib, 300 * mib, 1000 * mib}
	for _, size := range sizes {
		x := p.open(1)
		ptr := x.alloc(size, 0)
		r := x.reserved()
		// A second allocation of the same size: does it fit the first growth's rest?
		ptr2 := x.alloc(size, 0)
		r2 := x.reserved()
		p.printf("grow size=%dKiB reserved=%dKiB second_off=%dKiB reserved2=%dKiB", size/kib, r/kib, x.off(ptr2), r2/kib)
		x.free(ptr, 0)
		x.free(ptr2, 0)
		if err := x.close(); err != nil {
			return err
		}
	}
	return nil
}

// seq: runs of allocations without frees.
func (p *prober) seq() error {
	runs := []struct {
		name  string
		sizes []int
	}{
		{"20x6", []int{20 * mib, 20 * mib, 20 * mib, 20 * mib, 20 * mib, 20 * mib}},
		{"24+16", []int{24 * mib, 16 * mib}},
		{"24+16+16", []int{24 * mib, 16 * mib, 16 * mib}},
		{"1+100+1", []int{1 * mib, 100 * mib, 1 * mib}},
		{"1+40+1+20", []int{1 * mib, 40 * mib, 1 * mib, 20 * mib}},
		{"30+30+30", []int{30 * mib, 30 * mib, 30 * mib}},
		{"9x8", []int{9 * mib, 9 * mib, 9 * mib, 9 * mib, 9 * mib, 9 * mib, 9 * mib, 9 * mib}},
		{"100+100", []int{100 * mib, 100 * mib}},
		{"70+70+70", []int{70 * mib, 70 * mib, 70 * mib}},
	}
	for _, run := range runs {
		x := p.open(1)
		var ptrs []gpu.DevicePtr
		line := "seq " + run.name + ":"
		for _, size := range run.sizes {
			ptr := x.alloc(size, 0)
			ptrs = append(ptrs, ptr)
			line += fmt.Sprintf(" %dM@%dK/r%dM", size/mib, x.off(ptr), x.reserved()/mib)
		}
		p.printf("%s", line)
		// Free them all, then one allocation of their total: does it fit?
		var total int
		for i, ptr := range ptrs {
			x.free(ptr, 0)
			total += run.sizes[i]
		}
		x.do(x.s[0].Synchronize())
		big := x.alloc(total, 0)
		p.printf("seq %s: refill %dM@%dK/r%dM", run.name, total/mib, x.off(big), x.reserved()/mib)
		x.free(big, 0)
		if err := x.close(); err != nil {
			return err
		}
	}
	return nil
}

// fit: holes of 4, 8 and 2 MiB between live 1 MiB blocks, then requests.
func (p *prober) fit() error {
	for _, req := range []int{2 * mib, 3 * mib, 5 * mib, 1 * mib, 512 * kib} {
		x := p.open(1)
		sizes := []int{4 * mib, 1 * mib, 8 * mib, 1 * mib, 2 * mib, 1 * mib}
		var ptrs []gpu.DevicePtr
		for _, s := range sizes {
			ptrs = append(ptrs, x.alloc(s, 0))
		}
		x.free(ptrs[0], 0)
		x.free(ptrs[2], 0)
		x.free(ptrs[4], 0)
		x.do(x.s[0].Synchronize())
		got := x.alloc(req, 0)
		p.printf("fit holes 4M@%dK 8M@%dK 2M@%dK tail@%dK: %dK@%dK", x.off(ptrs[0]), x.off(ptrs[2]), x.off(ptrs[4]),
			x.off(ptrs[5])+1024, req/kib, x.off(got))
		x.free(got, 0)
		for _, i := range []int{1, 3, 5} {
			x.free(ptrs[i], 0)
		}
		if err := x.close(); err != nil {
			return err
		}
	}
	// A freed block at the start of a growth and the same size at its
	// end: which is reused (lowest address, most recent free)?
	x := p.open(1)
	a := x.alloc(4*mib, 0)
	m := x.alloc(8*mib, 0)
	c := x.alloc(4*mib, 0)
	e := x.alloc(1*mib, 0)
	x.free(c, 0)
	x.free(a, 0)
	x.do(x.s[0].Synchronize())
	got := x.alloc(4*mib, 0)
	p.printf("fit equal holes a@%dK c@%dK (a freed last): 4M@%dK", x.off(a), x.off(c), x.off(got))
	x.free(got, 0)
	x.free(m, 0)
	x.free(e, 0)
	return x.close()
}

// release: reserved after frees and synchronizations at each threshold.
func (p *prober) release() error {
	syncs := []struct {
		name string
		fn   func(x *session) error
	}{
		{"none", func(x *session) error { return nil }},
		{"query", func(x *session) error {
			if err := x.s[0].Query(); err != nil && !errors.Is(err, gpu.ErrNotReady) {
				return err
			}
			return nil
		}},
		{"alloc1M", func(x *session) error {
			p := x.alloc(mib, 0)
			x.free(p, 0)
			return x.err
		}},
		{"stream", func(x *session) error { return x.s[0].Synchronize() }},
		{"event", func(x *session) error {
			e, err := x.dev.NewEvent(false)
			if err != nil {
				return err
			}
			if err := e.Record(x.s[0]); err != nil {
				return err
			}
			if err := e.Synchronize(); err != nil {
				return err
			}
			return e.Destroy()
		}},
		{"device", func(x *session) error { return x.dev.Synchronize() }},
		{"otherstream", func(x *session) error { return x.s[1].Synchronize() }},
	}
	for _, thr := range []uint64{0, 40 * mib} {
		for _, sy := range syncs {
			x := p.open(2)
			x.set(gpu.PoolReleaseThreshold, thr)
			keep := x.alloc(8*mib, 0)
			a := x.alloc(100*mib, 0)
			b := x.alloc(20*mib, 0)
			before := x.reserved()
			x.free(a, 0)
			x.free(b, 0)
			afterFree := x.reserved()
			x.do(sy.fn(x))
			after := x.reserved()
			p.printf("release threshold=%dM sync=%s: live %dM reserved=%dM after_free=%dM after_sync=%dM", thr/mib, sy.name, 128, before/mib, afterFree/mib, after/mib)
			x.free(keep, 0)
			if err := x.close(); err != nil {
				return err
			}
		}
	}
	return nil
}

// trim: TrimTo on pools with partly used growths.
func (p *prober) trim() error {
	// after: the last allocation is made after the frees.
	cases := []struct {
		name  string
		sizes []int
		free  []int
		keep  uint64
		after bool
	}{
		{"128M-freed+1M", []int{128 * mib, 1 * mib}, []int{0}, 0, true},
		{"3x32M-mid", []int{32 * mib, 32 * mib, 32 * mib}, []int{1}, 0, false},
		{"100M-freed+1M", []int{100 * mib, 1 * mib}, []int{0}, 0, true},
		{"4x32M-free3-keep40M", []int{32 * mib, 32 * mib, 32 * mib, 32 * mib}, []int{0, 1, 2}, 40 * mib, false},
		{"200M-freed+60M", []int{200 * mib, 60 * mib}, []int{0}, 0, true},
	}
	for _, c := range cases {
		x := p.open(1)
		x.set(gpu.PoolReleaseThreshold, 1<<40)
		var ptrs []gpu.DevicePtr
		freeThem := func() {
			for _, j := range c.free {
				x.free(ptrs[j], 0)
			}
			x.do(x.s[0].Synchronize())
		}
		for i, size := range c.sizes {
			if c.after && i == len(c.sizes)-1 {
				freeThem()
			}
			ptrs = append(ptrs, x.alloc(size, 0))
		}
		if !c.after {
			freeThem()
		}
		before := x.reserved()
		x.do(x.pool.TrimTo(c.keep))
		after := x.reserved()
		line := fmt.Sprintf("trim %s keep=%dM: reserved=%dK after_trim=%dK addrs", c.name, c.keep/mib, before/kib, after/kib)
		for _, ptr := range ptrs {
			line += fmt.Sprintf(" %dK", x.off(ptr))
		}
		p.printf("%s", line)
		freed := map[int]bool{}
		for _, j := range c.free {
			freed[j] = true
		}
		for i, ptr := range ptrs {
			if !freed[i] {
				x.free(ptr, 0)
			}
		}
		if err := x.close(); err != nil {
			return err
		}
	}
	return nil
}

// reuse: a block freed on stream 0 and a request of its size on stream 1.
func (p *prober) reuse() error {
	k, err := kernels.Load(p.dev)
	if err != nil {
		return err
	}
	policies := []struct {
		name              string
		events, opp, intl uint64
	}{
		{"all", 1, 1, 1}, {"opportunistic", 0, 1, 0}, {"internal", 0, 0, 1}, {"none", 0, 0, 0}, {"events", 1, 0, 0},
	}
	for _, pol := range policies {
		for _, busy := range []bool{false, true} {
			for _, wait := range []bool{false, true} {
				x := p.open(2)
				x.set(gpu.PoolReuseFollowEventDependencies, pol.events)
				x.set(gpu.PoolReuseAllowOpportunistic, pol.opp)
				x.set(gpu.PoolReuseAllowInternalDependencies, pol.intl)
				x.set(gpu.PoolReleaseThreshold, 1<<40)
				a := x.alloc(8*mib, 0)
				if busy {
					x.do(k.Spin(x.s[0], 50*time.Millisecond))
				}
				x.free(a, 0)
				if wait {
					e, err := x.dev.NewEvent(false)
					x.do(err)
					if err == nil {
						x.do(e.Record(x.s[0]))
						x.do(x.s[1].WaitEvent(e))
						defer e.Destroy()
					}
				}
				if !busy {
					// let the free complete on the card before the request
					time.Sleep(5 * time.Millisecond)
				}
				start := time.Now()
				b := x.alloc(8*mib, 1)
				x.do(x.s[1].Synchronize())
				took := time.Since(start)
				same := b == a
				p.printf("reuse policy=%s busy=%v eventwait=%v: same_block=%v reserved=%dM s1_sync_waited=%v",
					pol.name, busy, wait, same, x.reserved()/mib, took > 25*time.Millisecond)
				x.free(b, 1)
				if err := x.close(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// small: spacing of small blocks.
func (p *prober) small() error {
	for _, size := range []int{1, 256, 257, 511, 512, 513, 1024, 4096, 65536, 1 * mib} {
		x := p.open(1)
		var ptrs []gpu.DevicePtr
		for range 4 {
			ptrs = append(ptrs, x.alloc(size, 0))
		}
		p.printf("small size=%d: offsets %d %d %d bytes", size, int64(ptrs[1]-ptrs[0]), int64(ptrs[2]-ptrs[1]), int64(ptrs[3]-ptrs[2]))
		for _, ptr := range ptrs {
			x.free(ptr, 0)
		}
		if err := x.close(); err != nil {
			return err
		}
	}
	return nil
}

// move: a 100 MiB block freed, then a request no free block fits. Does
// the pool grow by the whole request, or move the granules the freed
// block left idle?
func (p *prober) move() error {
	for _, sync := range []bool{false, true} {
		for _, big := range []int{200 * mib, 60 * mib} {
			x := p.open(1)
			x.set(gpu.PoolReleaseThreshold, 1<<40)
			a := x.alloc(100*mib, 0)
			b := x.alloc(20*mib, 0)
			r0 := x.reserved()
			x.free(a, 0)
			if sync {
				x.do(x.s[0].Synchronize())
			}
			c := x.alloc(big, 0)
			p.printf("move sync=%v: 100M@%dK 20M@%dK r%dM; free the 100M; %dM@%dK r%dM",
				sync, x.off(a), x.off(b), r0/mib, big/mib, x.off(c), x.reserved()/mib)
			x.free(b, 0)
			x.free(c, 0)
			if err := x.close(); err != nil {
				return err
			}
		}
	}
	return nil
}

// replay replays one trace on a fresh pool and prints every event.
func (p *prober) replay(path string) error {
	f, err := trace.Open(path, nil)
	if err != nil {
		return err
	}
	defer f.Close()
	x := p.open(0)
	streams := map[uint64]int{}
	live := map[uint64]struct {
		ptr gpu.DevicePtr
		s   int
		n   int64
	}{}
	var liveBytes, peakLive, peakRes uint64
	fmt.Fprintf(p.w, "trace %s\n", path)
	for i := 0; x.err == nil; i++ {
		ev, err := f.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		si, ok := streams[ev.Stream]
		if !ok {
			s, err := p.dev.NewStream()
			if err != nil {
				return err
			}
			x.s = append(x.s, s)
			si = len(x.s) - 1
			streams[ev.Stream] = si
		}
		switch ev.Op {
		case trace.Alloc:
			if old, ok := live[ev.Ptr]; ok {
				x.free(old.ptr, old.s)
				liveBytes -= uint64(old.n)
			}
			ptr := x.alloc(int(ev.Size), si)
			live[ev.Ptr] = struct {
				ptr gpu.DevicePtr
				s   int
				n   int64
			}{ptr, si, ev.Size}
			liveBytes += uint64(ev.Size)
			peakLive = max(peakLive, liveBytes)
			r := x.reserved()
			peakRes = max(peakRes, r)
			fmt.Fprintf(p.w, "%d a %d s%d @%d r%d\n", i, ev.Size, si, x.off(ptr), r/kib)
		case trace.Free:
			b, ok := live[ev.Ptr]
			if !ok {
				continue
			}
			delete(live, ev.Ptr)
			x.free(b.ptr, si)
			liveBytes -= uint64(b.n)
			fmt.Fprintf(p.w, "%d f %d s%d @%d r%d\n", i, b.n, si, x.off(b.ptr), x.reserved()/kib)
		}
	}
	for _, b := range live {
		x.free(b.ptr, b.s)
	}
	if x.err != nil {
		return x.err
	}
	fmt.Fprintf(p.w, "summary %s peak_live=%d peak_reserved=%d ratio=%.3f\n", path, peakLive, peakRes, float64(peakRes)/float64(peakLive))
	return x.close()
}
