// Proof that the race detector sees stream ordering: each scenario runs in
// a child process (this test binary, re-executed), and the parent checks
// whether the child reported a DATA RACE. Unordered scenarios must be
// reported; ordered ones must be clean, which also shows that the
// simulator's own bookkeeping adds no happens-before edge that would hide
// a race, and none that would invent one.

package sim_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/kernels"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

const scenarioEnv = "SIM_RACE_SCENARIO"

// env is what a scenario works with.
type env struct {
	dev    gpu.Device
	sd     *sim.Device
	k      *kernels.Kernels
	s1, s2 gpu.Stream
	e      gpu.Event
	p      gpu.DevicePtr // 1 MiB from Malloc
}

const words = 1 << 18 // of p

func check(err error) {
	if err != nil {
		panic(err)
	}
}

type scenario struct {
	name string
	race bool // a data race must be reported
	run  func(v *env)
}

var scenarios = []scenario{
	{"another process reads an import without waiting on the exporter's event", true, func(v *env) { ipcScenario(v, false) }},
	{"another process reads an import after waiting on the exporter's event", false, func(v *env) { ipcScenario(v, true) }},
	{"unordered writes on two streams", true, func(v *env) {
		release := v.sd.Hold(v.s2)
		check(v.k.Fill(v.s2, v.p, words, 2)) // runs after S1's fill, unordered with it
		check(v.k.Fill(v.s1, v.p, words, 1))
		check(v.s1.Synchronize())
		release()
		check(v.s2.Synchronize())
	}},
	{"event-ordered writes on two streams", false, func(v *env) {
		release := v.sd.Hold(v.s2)
		check(v.k.Fill(v.s1, v.p, words, 1))
		check(v.e.Record(v.s1))
		check(v.s2.WaitEvent(v.e))
		check(v.k.Fill(v.s2, v.p, words, 2))
		check(v.s1.Synchronize())
		release()
		check(v.s2.Synchronize())
	}},
	{"memset on S1, copy out on S2, unordered", true, func(v *env) {
		check(v.dev.MemsetD8Async(v.p, 1, 4096, v.s1))
		check(v.s1.Synchronize())
		release := v.sd.Hold(v.s1)
		check(v.dev.MemsetD8Async(v.p, 2, 4096, v.s1))
		out := make([]byte, 4096)
		check(v.dev.CopyDtoHAsync(out, v.p, v.s2))
		check(v.s2.Synchronize())
		release()
		check(v.s1.Synchronize())
	}},
	{"two streams reading the same bytes", false, func(v *env) {
		check(v.k.Fill(v.s1, v.p, words, 1))
		check(v.e.Record(v.s1))
		check(v.s2.WaitEvent(v.e))
		a, b := make([]byte, 4096), make([]byte, 4096)
		check(v.dev.CopyDtoHAsync(a, v.p, v.s1))
		check(v.dev.CopyDtoHAsync(b, v.p, v.s2))
		check(v.s1.Synchronize())
		check(v.s2.Synchronize())
	}},
	{"host synchronize orders later work", false, func(v *env) {
		check(v.k.Fill(v.s1, v.p, words, 1))
		check(v.s1.Synchronize())
		check(v.k.Fill(v.s2, v.p, words, 2))
		check(v.s2.Synchronize())
	}},
	{"host query orders later work", false, func(v *env) {
		check(v.k.Fill(v.s1, v.p, words, 1))
		for errors.Is(v.s1.Query(), gpu.ErrNotReady) {
			time.Sleep(time.Millisecond)
		}
		check(v.k.Fill(v.s2, v.p, words, 2))
		check(v.s2.Synchronize())
	}},
	{"event synchronize orders later work", false, func(v *env) {
		check(v.k.Fill(v.s1, v.p, words, 1))
		check(v.e.Record(v.s1))
		check(v.e.Synchronize())
		check(v.k.Fill(v.s2, v.p, words, 2))
		check(v.dev.Synchronize())
	}},
	{"stream order across idle periods", false, func(v *env) {
		for i := range 3 {
			check(v.k.Fill(v.s1, v.p, 1024, uint32(i)))
			time.Sleep(30 * time.Millisecond) // the stream's worker exits in between
		}
		check(v.s1.Synchronize())
	}},
	{"device synchronize after another goroutine's orders a host read", false, func(v *env) {
		// The other goroutine's cuCtxSynchronize covers s1; this one finds
		// s1 with no new work and does not visit it, and still orders
		// the read after the copy, as the driver does.
		out := make([]byte, 64)
		check(v.dev.CopyDtoHAsync(out, v.p, v.s1))
		go func() { check(v.dev.Synchronize()) }()
		time.Sleep(50 * time.Millisecond) // no happens-before edge
		check(v.dev.Synchronize())
		_ = out[0]
	}},
	{"host reads a copy before synchronizing", true, func(v *env) {
		out := make([]byte, 64)
		check(v.dev.CopyDtoHAsync(out, v.p, v.s1))
		time.Sleep(20 * time.Millisecond)
		_ = out[0] // completed in time, but not ordered: a race
		check(v.s1.Synchronize())
	}},
	{"kernel atomics do not order streams", true, func(v *env) {
		counter, err := v.dev.Malloc(4)
		check(err)
		release := v.sd.Hold(v.s2)
		check(v.k.Check(v.s2, v.p, 16, 99, counter)) // atomic add on counter
		check(v.k.Fill(v.s2, v.p+4096, 16, 2))
		check(v.k.Fill(v.s1, v.p+4096, 16, 1))
		check(v.k.Check(v.s1, v.p, 16, 99, counter)) // atomic add on counter
		check(v.s1.Synchronize())
		release()
		check(v.s2.Synchronize())
	}},
	{"pool: same-stream reuse", false, func(v *env) {
		for i := range 3 {
			q, err := v.dev.MallocAsync(1<<20, v.s1)
			check(err)
			check(v.k.Fill(v.s1, q, words, uint32(i)))
			check(v.dev.FreeAsync(q, v.s1))
		}
		check(v.s1.Synchronize())
	}},
	{"pool: opportunistic reuse of a completed free", false, func(v *env) {
		q, err := v.dev.MallocAsync(1<<20, v.s1)
		check(err)
		check(v.k.Fill(v.s1, q, words, 1))
		check(v.dev.FreeAsync(q, v.s1))
		for free := v.sd.LastOp(v.s1); !v.sd.Completed(free); { // the host does not observe it
			time.Sleep(time.Millisecond)
		}
		r, err := v.dev.MallocAsync(1<<20, v.s2)
		check(err)
		if r != q {
			panic(fmt.Sprintf("scenario needs reuse: got %#x, freed %#x", r, q))
		}
		check(v.k.Fill(v.s2, r, words, 2))
		check(v.s2.Synchronize())
		check(v.s1.Synchronize())
	}},
	{"pool: reuse with an inserted dependency", false, func(v *env) {
		pool, err := v.dev.DefaultMemPool()
		check(err)
		check(pool.SetAttribute(gpu.PoolReuseAllowOpportunistic, 0))
		check(pool.SetAttribute(gpu.PoolReleaseThreshold, ^uint64(0)))
		// Fill the default pool's only chunk so S2 must reuse it or grow.
		q, err := v.dev.MallocAsync(2<<20, v.s1)
		check(err)
		release := v.sd.Hold(v.s1)
		check(v.k.Fill(v.s1, q, words, 1))
		check(v.dev.FreeAsync(q, v.s1))
		// The device has no room to grow: S2 can only reuse q, after S1's free.
		r, err := v.dev.MallocAsync(2<<20, v.s2)
		check(err)
		if r != q {
			panic(fmt.Sprintf("scenario needs reuse: got %#x, freed %#x", r, q))
		}
		check(v.k.Fill(v.s2, r, words, 2))
		release()
		check(v.s2.Synchronize())
		check(v.s1.Synchronize())
	}},
	{"unordered writes through a suballocated region", true, func(v *env) {
		// What an allocator above the driver gets wrong: one driver
		// allocation, a block handed to S2 while S1 still writes it.
		release := v.sd.Hold(v.s2)
		check(v.dev.MemsetD8Async(v.p+512, 2, 256, v.s2))
		check(v.dev.MemsetD8Async(v.p+256, 1, 1024, v.s1))
		check(v.s1.Synchronize())
		release()
		check(v.s2.Synchronize())
	}},
}

// TestRaceScenario is the child side of TestRaceDetection: it runs the
// scenario named by $SIM_RACE_SCENARIO and is skipped otherwise.
func TestRaceScenario(t *testing.T) {
	name := os.Getenv(scenarioEnv)
	if name == "" {
		t.Skip("runs only as the child of TestRaceDetection")
	}
	capacity := uint64(0)
	if strings.Contains(name, "inserted dependency") {
		capacity = 4 << 20 // room for p (charged 2 MiB) and one 2 MiB chunk
	}
	dev, err := sim.New(sim.Config{Capacity: capacity}).Device(0)
	check(err)
	k, err := kernels.Load(dev)
	check(err)
	v := &env{dev: dev, sd: dev.(*sim.Device), k: k}
	v.s1, err = dev.NewStream()
	check(err)
	v.s2, err = dev.NewStream()
	check(err)
	v.e, err = dev.NewEvent(false)
	check(err)
	v.p, err = dev.Malloc(4 * words)
	check(err)
	for _, sc := range scenarios {
		if sc.name == name {
			sc.run(v)
			fmt.Println("scenario done")
			return
		}
	}
	t.Fatalf("no scenario %q", name)
}

// bookkeeping matches functions of the simulator that must never be the
// place of a reported access: only data movement (chunks, copies, kernels)
// and the test's own code may be.
var bookkeeping = regexp.MustCompile(`gpu/sim\.\((\*stream|\*event|\*memPool|\*segment|\*segTable|\*addrSpace|\*Backend)\)|gpu/sim\.vclock|gpu/sim\.clock|gpu/sim\.\(\*Device\)\.(lookup|inject|mallocAsync|syncAll|enqueueMem)`)

// bookkeepingFrame returns the top frame of the first access in a race
// report that lies in the simulator's bookkeeping, or "".
func bookkeepingFrame(report string) string {
	lines := strings.Split(report, "\n")
	for i, l := range lines {
		if (strings.HasPrefix(l, "Write at ") || strings.HasPrefix(l, "Read at ") ||
			strings.HasPrefix(l, "Previous write at ") || strings.HasPrefix(l, "Previous read at ")) && i+1 < len(lines) {
			if top := strings.TrimSpace(lines[i+1]); bookkeeping.MatchString(top) {
				return top
			}
		}
	}
	return ""
}

// TestRaceDetection runs every scenario in a child process and checks that
// exactly the unordered ones are reported by the race detector.
func TestRaceDetection(t *testing.T) {
	if !raceBuild {
		t.Skip("the race detector is off: run with go test -race")
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestRaceScenario$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), scenarioEnv+"="+sc.name)
			out, _ := cmd.CombinedOutput()
			text := string(out)
			if !strings.Contains(text, "scenario done") {
				t.Fatalf("scenario did not complete:\n%s", text)
			}
			raced := strings.Contains(text, "WARNING: DATA RACE")
			if f := bookkeepingFrame(text); f != "" {
				t.Errorf("race reported inside the simulator's bookkeeping (%s), not on device or host bytes:\n%s", f, text)
			}
			switch {
			case sc.race && !raced:
				t.Errorf("want a DATA RACE report, got none:\n%s", text)
			case !sc.race && raced:
				t.Errorf("want no race, got:\n%s", text)
			}
		})
	}
}

// ipcScenario: the exporter writes an allocation of an exported pool on a
// held stream and records an interprocess event; another simulated
// process (a second Backend) imports the allocation and copies it out,
// after waiting on the imported event or not.
func ipcScenario(v *env, wait bool) {
	pool, err := v.sd.NewExportableMemPool(gpu.HandlePOSIX)
	check(err)
	p, err := v.dev.MallocFromPoolAsync(4*words, pool, v.s1)
	check(err)
	check(v.s1.Synchronize())
	release := v.sd.Hold(v.s1)
	check(v.k.Fill(v.s1, p, words, 1))
	ev, err := v.sd.NewIPCEvent()
	check(err)
	check(ev.Record(v.s1))
	sh, err := v.sd.ExportMemPool(pool, gpu.HandlePOSIX)
	check(err)
	data, err := v.sd.ExportPointer(p)
	check(err)
	eh, err := v.sd.ExportEvent(ev)
	check(err)

	other, err := sim.New(sim.Config{Capacity: 1 << 30}).Device(0)
	check(err)
	imp := other.(*sim.Device)
	ipool, err := imp.ImportMemPool(sh)
	check(err)
	sh.File.Close()
	q, err := imp.ImportPointer(ipool, data)
	check(err)
	si, err := imp.NewStream()
	check(err)
	if wait {
		iev, err := imp.ImportEvent(eh)
		check(err)
		check(si.WaitEvent(iev))
	}
	out := make([]byte, 4096)
	check(imp.CopyDtoHAsync(out, q, si))
	if !wait {
		check(si.Synchronize()) // the read runs before the exporter's write
	}
	release()
	check(si.Synchronize())
	check(v.s1.Synchronize())
}
