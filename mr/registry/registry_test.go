package registry

import (
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/mr"
)

func TestTable(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range table {
		if r.Name == "" || r.Name == "all" || strings.ContainsAny(r.Name, ", \t") {
			t.Errorf("name %q cannot be typed in a --resource list", r.Name)
		}
		if seen[r.Name] {
			t.Errorf("%s: twice in the table", r.Name)
		}
		seen[r.Name] = true
		if (r.alone == nil) == (r.over == nil) {
			t.Errorf("%s: want exactly one of alone and over", r.Name)
		}
	}
	for _, set := range []struct {
		name string
		s    Set
	}{{"All", All()}, {"Replay", Replay()}} {
		if len(set.s) == 0 {
			t.Errorf("%s is empty", set.name)
		}
		for i, n := range set.s {
			if _, ok := Lookup(n); !ok {
				t.Errorf("%s names %q, which is not in the table", set.name, n)
			}
			if slices.Index(set.s, n) != i {
				t.Errorf("%s names %q twice", set.name, n)
			}
		}
	}
	hosts := 0
	for _, r := range table {
		if r.Host {
			hosts++
			if slices.Contains(All(), r.Name) {
				t.Errorf("All names %q, a resource of host memory", r.Name)
			}
		}
	}
	if got := len(All()); got != len(table)-hosts {
		t.Errorf("All has %d names, the table %d entries of device memory", got, len(table)-hosts)
	}
	// The orders "all" expands to are part of the command's output.
	if want := (Set{"direct", "managed", "async", "pool", "fixedsize", "binning", "arena", "vmm", "pool_vmm", "pool_vmm_holes", "pool_vmm_holes_pair", "async_noreturnwait"}); !slices.Equal(All(), want) {
		t.Errorf("All = %v, want %v", All(), want)
	}
	if want := (Set{"direct", "async", "pool", "arena", "binning", "vmm", "pool_vmm", "pool_vmm_holes", "pool_vmm_holes_pair", "hostpool", "hostpool_driver"}); !slices.Equal(Replay(), want) {
		t.Errorf("Replay = %v, want %v", Replay(), want)
	}
}

func TestParse(t *testing.T) {
	replayAll := "want one of direct, async, pool, arena, binning, vmm, pool_vmm, pool_vmm_holes, pool_vmm_holes_pair, hostpool, hostpool_driver, or all)"
	for _, tc := range []struct {
		set     Set
		list    string
		want    []string
		wantErr string // the exact message; the error matches ErrUnknown
	}{
		{Replay(), "pool", []string{"pool"}, ""},
		{Replay(), "async,pool", []string{"async", "pool"}, ""},
		{Replay(), " direct , pool\t", []string{"direct", "pool"}, ""},
		{Replay(), "all", []string{"direct", "async", "pool", "arena", "binning", "vmm", "pool_vmm", "pool_vmm_holes", "pool_vmm_holes_pair"}, ""},
		{Replay(), "binning,all", []string{"binning", "direct", "async", "pool", "arena", "vmm", "pool_vmm", "pool_vmm_holes", "pool_vmm_holes_pair"}, ""},
		{Replay(), "all,pool", []string{"direct", "async", "pool", "arena", "binning", "vmm", "pool_vmm", "pool_vmm_holes", "pool_vmm_holes_pair"}, ""},
		{Replay(), "pool,pool", []string{"pool"}, ""},
		{Replay(), "hostpool,all,hostpool_driver", []string{"hostpool", "direct", "async", "pool", "arena", "binning", "vmm", "pool_vmm", "pool_vmm_holes", "pool_vmm_holes_pair", "hostpool_driver"}, ""},
		{All(), "direct, pool,async,pool", []string{"direct", "pool", "async"}, ""},
		{All(), "all", All(), ""},
		{Set{"a"}, "all,all", []string{"a"}, ""},
		{Replay(), "nope", nil, `unknown resource "nope" (` + replayAll},
		{Replay(), "pool,nope", nil, `unknown resource "nope" (` + replayAll},
		{Replay(), "", nil, `unknown resource "" (` + replayAll},
		{Replay(), "pool,", nil, `unknown resource "" (` + replayAll},
		{Replay(), " , ", nil, `unknown resource "" (` + replayAll},
		{Replay(), "Pool", nil, `unknown resource "Pool" (` + replayAll},
		{Replay(), "fixedsize", nil, `unknown resource "fixedsize" (` + replayAll},
		{All(), "pool,nope", nil, `unknown resource "nope" (want one of direct, managed, async, pool, fixedsize, binning, arena, vmm, pool_vmm, pool_vmm_holes, pool_vmm_holes_pair, async_noreturnwait, or all)`},
		{Set{}, "all", nil, ""},
		{Set{}, "pool", nil, `unknown resource "pool" (want one of , or all)`},
	} {
		got, err := tc.set.Parse(tc.list)
		if tc.wantErr == "" {
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("%v.Parse(%q) = %q, %v; want %q", tc.set, tc.list, got, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, ErrUnknown) || err.Error() != tc.wantErr || got != nil {
			t.Errorf("%v.Parse(%q) = %q, %v; want the error %q", tc.set, tc.list, got, err, tc.wantErr)
		}
	}
}

// TestNew builds every resource with each upstream, serves a request on
// it and closes it: the device holds nothing afterwards.
func TestNew(t *testing.T) {
	dev, s := simStream(t)
	base := used(t, dev)
	for _, r := range Resources() {
		for _, o := range []Options{{}, {Upstream: UpstreamAsync, KeepReserved: true, MaxBlock: 8 << 10}} {
			res, closeFn, err := r.New(dev, o)
			if err != nil {
				t.Fatalf("%s %+v: %v", r.Name, o, err)
			}
			p, err := res.Allocate(4<<10, s)
			if err != nil {
				t.Fatalf("%s %+v: allocate: %v", r.Name, o, err)
			}
			if err := res.Deallocate(p, 4<<10, s); err != nil {
				t.Fatalf("%s %+v: free: %v", r.Name, o, err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if err := closeFn(); err != nil {
				t.Errorf("%s %+v: close: %v", r.Name, o, err)
			}
			if u := used(t, dev); u != base {
				t.Errorf("%s %+v: %d bytes of the device in use after close, want %d", r.Name, o, u, base)
			}
		}
	}
}

// TestUpstream: over Direct, what a suballocator reports as reserved is
// all the device memory it holds; over Async, the driver pool reserves
// more behind it.
func TestUpstream(t *testing.T) {
	dev, s := simStream(t)
	for _, tc := range []struct {
		up      Upstream
		behind  bool // the device holds more than the pool reports
		wantErr error
	}{
		{UpstreamDirect, false, nil},
		{UpstreamAsync, true, nil},
		{Upstream(7), false, ErrUpstream},
	} {
		base := used(t, dev)
		res, closeFn, err := New("pool", dev, Options{Upstream: tc.up})
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) || err.Error() != "upstream: unknown upstream 7" || res != nil || closeFn != nil {
				t.Errorf("upstream %d: %v, %v; want %v", tc.up, res, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		p, err := res.Allocate(4<<10, s)
		if err != nil {
			t.Fatal(err)
		}
		reserved := res.(mr.UsageReporter).Usage().Reserved
		if held := used(t, dev) - base; reserved == 0 || (held > reserved) != tc.behind {
			t.Errorf("upstream %d: the device holds %d bytes, the pool reports %d reserved", tc.up, held, reserved)
		}
		if err := res.Deallocate(p, 4<<10, s); err != nil {
			t.Fatal(err)
		}
		if err := closeFn(); err != nil {
			t.Fatal(err)
		}
	}
	// Resources that stand alone ignore the upstream.
	if _, closeFn, err := New("direct", dev, Options{Upstream: Upstream(7)}); err != nil {
		t.Errorf("direct with upstream 7: %v", err)
	} else if err := closeFn(); err != nil {
		t.Error(err)
	}
}

// TestKeepReserved: async's driver pool keeps what it reserved across a
// synchronization only when asked to.
func TestKeepReserved(t *testing.T) {
	dev, s := simStream(t)
	for _, keep := range []bool{false, true} {
		res, closeFn, err := New("async", dev, Options{KeepReserved: keep})
		if err != nil {
			t.Fatal(err)
		}
		p, err := res.Allocate(1<<20, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := res.Deallocate(p, 1<<20, s); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if kept := res.(mr.UsageReporter).Usage().Reserved; (kept > 0) != keep {
			t.Errorf("KeepReserved %v: %d bytes reserved after a synchronization", keep, kept)
		}
		if err := closeFn(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMaxBlock: fixedsize serves MaxBlock bytes and refuses more.
func TestMaxBlock(t *testing.T) {
	dev, s := simStream(t)
	res, closeFn, err := New("fixedsize", dev, Options{MaxBlock: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	p, err := res.Allocate(64<<10, s)
	if err != nil {
		t.Fatalf("allocate MaxBlock: %v", err)
	}
	if _, err := res.Allocate(64<<10+1, s); !errors.Is(err, mr.ErrOutOfMemory) {
		t.Errorf("allocate MaxBlock+1: %v, want %v", err, mr.ErrOutOfMemory)
	}
	if err := res.Deallocate(p, 64<<10, s); err != nil {
		t.Fatal(err)
	}
}

// TestNewErrors: a name not in the table, and a suballocator that refuses
// its options, which must leave nothing of its upstream open.
func TestNewErrors(t *testing.T) {
	dev, _ := simStream(t)
	res, closeFn, err := New("nope", dev, Options{})
	want := `registry: unknown resource "nope" (want one of direct, managed, async, pool, fixedsize, binning, arena, vmm, pool_vmm, pool_vmm_holes, pool_vmm_holes_pair, async_noreturnwait)`
	if !errors.Is(err, ErrUnknown) || err.Error() != want || res != nil || closeFn != nil {
		t.Errorf("New(nope) = %v, %v; want %q", res, err, want)
	}
	counted := &poolCounter{Device: dev}
	res, closeFn, err = New("fixedsize", counted, Options{Upstream: UpstreamAsync, KeepReserved: true, MaxBlock: -1})
	if !errors.Is(err, mr.ErrInvalidSize) || res != nil || closeFn != nil {
		t.Errorf("fixedsize with MaxBlock -1 = %v, %v; want %v", res, err, mr.ErrInvalidSize)
	}
	if made, live := counted.made.Load(), counted.live.Load(); made != 1 || live != 0 {
		t.Errorf("failed New: %d driver pools made, %d not destroyed; want 1, 0", made, live)
	}
}

// poolCounter is a device that counts the driver pools made on it and
// those not yet destroyed.
type poolCounter struct {
	gpu.Device
	made, live atomic.Int64
}

func (d *poolCounter) NewMemPool() (gpu.MemPool, error) {
	p, err := d.Device.NewMemPool()
	if err != nil {
		return nil, err
	}
	d.made.Add(1)
	d.live.Add(1)
	return countedPool{p, &d.live}, nil
}

type countedPool struct {
	gpu.MemPool
	live *atomic.Int64
}

func (p countedPool) Destroy() error {
	err := p.MemPool.Destroy()
	if err == nil {
		p.live.Add(-1)
	}
	return err
}

func simStream(t *testing.T) (gpu.Device, gpu.Stream) {
	t.Helper()
	dev, err := sim.New(sim.Config{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Synchronize(); s.Destroy() })
	return dev, s
}

// used is the device memory in use: allocations and driver pool
// reservations.
func used(t *testing.T, dev gpu.Device) uint64 {
	t.Helper()
	if err := dev.Synchronize(); err != nil {
		t.Fatal(err)
	}
	free, total, err := dev.MemGetInfo()
	if err != nil {
		t.Fatal(err)
	}
	return total - free
}

func TestParseUpstream(t *testing.T) {
	for _, tc := range []struct {
		name    string
		want    Upstream
		wantErr error
	}{
		{"direct", UpstreamDirect, nil},
		{"async", UpstreamAsync, nil},
		{"", 0, ErrUpstream},
		{"Async", 0, ErrUpstream},
		{"pool", 0, ErrUpstream},
	} {
		got, err := ParseUpstream(tc.name)
		if !errors.Is(err, tc.wantErr) || got != tc.want {
			t.Errorf("ParseUpstream(%q) = %v, %v; want %v, %v", tc.name, got, err, tc.want, tc.wantErr)
		}
		if err == nil && got.String() != tc.name {
			t.Errorf("%q: String() = %q", tc.name, got.String())
		}
	}
	if got := Upstream(7).String(); got != "Upstream(7)" {
		t.Errorf("Upstream(7).String() = %q", got)
	}
	if got := Upstreams(); !slices.Equal(got, []string{"direct", "async"}) {
		t.Errorf("Upstreams() = %v", got)
	}
}

// countingUpstream counts the calls a suballocator makes to its upstream.
type countingUpstream struct {
	mr.Resource
	allocs, frees int
}

func (c *countingUpstream) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	c.allocs++
	return c.Resource.Allocate(size, s)
}

func (c *countingUpstream) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	c.frees++
	return c.Resource.Deallocate(p, size, s)
}

// TestWrapUpstream: a suballocator draws its chunks through the wrapper;
// a resource that stands alone is not wrapped; closing still closes the
// upstream (its chunk goes back).
func TestWrapUpstream(t *testing.T) {
	dev, s := simStream(t)
	for _, name := range []string{"pool", "arena", "binning", "fixedsize", "async"} {
		var c *countingUpstream
		wrap := func(up mr.Resource) mr.Resource {
			c = &countingUpstream{Resource: up}
			return c
		}
		base := used(t, dev)
		res, closeFn, err := New(name, dev, Options{Upstream: UpstreamAsync, WrapUpstream: wrap})
		if err != nil {
			t.Fatal(err)
		}
		p, err := res.Allocate(4<<10, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := res.Deallocate(p, 4<<10, s); err != nil {
			t.Fatal(err)
		}
		if err := closeFn(); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		switch {
		case name == "async" && c != nil:
			t.Errorf("async: wrapped an upstream it does not have")
		case name != "async" && (c == nil || c.allocs == 0 || c.allocs != c.frees):
			t.Errorf("%s: upstream calls through the wrapper: %+v", name, c)
		}
		if held := used(t, dev) - base; held != 0 {
			t.Errorf("%s: %d bytes still held after close", name, held)
		}
	}
}
