// Package registry builds memory resources by name: the one table of
// names and constructors that the streamalloc command (replay and bench)
// and the benchmark suite of package bench read, and the parser of the
// lists of names that their --resource flags take ("async,pool", "all").
//
// Each name builds a fresh resource on a gpu.Device. A suballocator
// (pool, fixedsize, binning, arena) draws its chunks from an upstream that
// Options.Upstream chooses, and the function New returns with it closes
// the suballocator first and then the upstream, reporting both errors.
// The zero Options build suballocators over Direct and driver pools that
// return memory at each synchronization. Trace replay builds them over
// Async by default, as a program should (the README's stack), so that
// its timings are not cuMemAlloc's, and over Direct when asked; what a
// suballocator reports as reserved is what it took from its upstream
// either way. The benchmarks ask for an Async upstream that keeps what it
// reserved, so that they time the suballocator and not the system's
// allocator.
//
// A Set is the names one command offers, in the order its "all" expands
// to: All is every entry of device memory in the table (streamalloc
// bench and the benchmark suite), Replay the resources streamalloc replay
// offers. A set's "all" leaves out the host pools (Set.Every), which run
// only when named.
//
// # Adding a resource to the command
//
// Write the resource in package mr (its file, its conformance test), then
// add one entry to the table below: its name, the word users type, and
// either alone, for a resource built on the device, or over, for a
// suballocator built on the upstream it is given (New then builds and
// closes that upstream). `streamalloc bench`, its "all" and the benchmark
// suite pick the entry up at once. Mark it Variant if it differs from
// another entry in one option that only some workloads compare (name it
// in those workloads' lists in package bench), mark it Host if it hands
// out host memory (bench and every "all" leave it out), and add its name
// to Replay if `streamalloc replay` should offer it. TestTable checks that
// every name is unique and every Set names only entries of the table.
package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// ErrUnknown is the error, wrapped, of a resource name that is not in
// the table, or not in the Set being parsed.
var ErrUnknown = errors.New("unknown resource")

// ErrUpstream is the error, wrapped, of an Options.Upstream that names
// no upstream.
var ErrUpstream = errors.New("unknown upstream")

// An Upstream names the resource a suballocator draws its chunks from.
type Upstream int

const (
	// UpstreamDirect is mr.Direct (cuMemAlloc): no driver pool caches
	// memory behind the suballocator, so the reserved bytes it reports
	// are all it holds.
	UpstreamDirect Upstream = iota
	// UpstreamAsync is an mr.Async on a driver pool of its own, closed
	// after the suballocator.
	UpstreamAsync
)

// upstreamNames are the words for each Upstream, in its order.
var upstreamNames = []string{UpstreamDirect: "direct", UpstreamAsync: "async"}

// Upstreams returns the names ParseUpstream accepts.
func Upstreams() []string { return slices.Clone(upstreamNames) }

// String is the upstream's name ("direct", "async").
func (u Upstream) String() string {
	if u >= 0 && int(u) < len(upstreamNames) {
		return upstreamNames[u]
	}
	return fmt.Sprintf("Upstream(%d)", int(u))
}

// ParseUpstream returns the Upstream called name; another name is an
// error matching ErrUpstream.
func ParseUpstream(name string) (Upstream, error) {
	if i := slices.Index(upstreamNames, name); i >= 0 {
		return Upstream(i), nil
	}
	return 0, fmt.Errorf("registry: %w %q (want one of %s)", ErrUpstream, name, strings.Join(upstreamNames, ", "))
}

// Options say how New builds a resource. The zero value builds
// suballocators over Direct.
type Options struct {
	// Upstream is what a suballocator draws its chunks from; resources
	// that stand alone ignore it.
	Upstream Upstream
	// KeepReserved makes the driver pools that New creates (those of
	// async and its variants, and an UpstreamAsync) keep every byte they
	// reserve until they are closed, instead of returning memory to the
	// system at each synchronization.
	KeepReserved bool
	// MaxBlock is the largest request the resource will be asked for:
	// fixedsize's block size (0: mr's default, 1 MiB).
	MaxBlock int
	// WrapUpstream, if set, is applied to the upstream before the
	// suballocator is built over it: the suballocator draws from what it
	// returns (a replay's timer, a logging adaptor), and the function New
	// returns still closes the upstream itself. Resources that stand
	// alone ignore it.
	WrapUpstream func(mr.Resource) mr.Resource
}

// keptBytes is the release threshold of a pool that keeps everything it
// reserved.
const keptBytes = 1 << 62

// A Resource is one entry of the table: a name and how to build it.
type Resource struct {
	// Name is what users type in a --resource list.
	Name string
	// Variant marks a resource that differs from another entry in one
	// option that only some workloads compare; the benchmark suite runs
	// it only in the workloads that name it.
	Variant bool
	// Host marks a resource of page-locked host memory (a host pool):
	// its addresses are the host's, which the simulator's kernels refuse
	// and a program stages copies through. Replay offers it, to study the
	// allocator over a trace's sizes and streams; All and the benchmark
	// suite, whose workloads run kernels on the memory, leave it out.
	Host bool

	// Exactly one of alone and over is set: alone builds a resource on
	// the device, over a suballocator on the upstream it is given.
	alone func(dev gpu.Device, o Options) (mr.Resource, error)
	over  func(up mr.Resource, o Options) (mr.Resource, error)
}

// table is every resource the command can build, in the order All lists
// them.
var table = []Resource{
	{Name: "direct", alone: func(dev gpu.Device, _ Options) (mr.Resource, error) {
		return mr.NewDirect(dev), nil
	}},
	{Name: "managed", alone: func(dev gpu.Device, _ Options) (mr.Resource, error) {
		return mr.NewManaged(dev), nil
	}},
	{Name: "async", alone: func(dev gpu.Device, o Options) (mr.Resource, error) {
		return newAsync(dev, o, false)
	}},
	{Name: "pool", over: func(up mr.Resource, _ Options) (mr.Resource, error) {
		return mr.NewPool(up, mr.PoolOptions{})
	}},
	{Name: "fixedsize", over: func(up mr.Resource, o Options) (mr.Resource, error) {
		return mr.NewFixedSize(up, mr.FixedSizeOptions{BlockSize: o.MaxBlock, BlocksPerChunk: 16})
	}},
	{Name: "binning", over: func(up mr.Resource, _ Options) (mr.Resource, error) {
		return mr.NewBinning(up, mr.BinningOptions{})
	}},
	{Name: "arena", over: func(up mr.Resource, _ Options) (mr.Resource, error) {
		return mr.NewArena(up, mr.ArenaOptions{})
	}},
	// vmm, pool_vmm and pool_vmm_holes map physical memory into a reserved range
	// (mr.Virtual): variants of direct and pool for the workloads that
	// compare them. pool_vmm serves a small request at the pool's
	// high-water mark from mapped free room (mr.PoolOptions.SmallAtPeak):
	// on the recorded traces it keeps every one within 1.03 of peak live
	// (without, three reach 1.031-1.033), for one granule more on oom-h100
	// (1.0009 to 1.0013), and a pair served from the lists costs the same.
	{Name: "vmm", Variant: true, alone: func(dev gpu.Device, _ Options) (mr.Resource, error) {
		return mr.NewVirtual(dev, mr.VirtualOptions{})
	}},
	{Name: "pool_vmm", Variant: true, alone: func(dev gpu.Device, _ Options) (mr.Resource, error) {
		return newPoolOverVirtual(dev, mr.PoolOptions{SmallAtPeak: true})
	}},
	// pool_vmm_holes is pool_vmm that fills the holes live blocks leave
	// in their granules (mr.PoolOptions.PackHoles): less mapped memory
	// on most traces, a slower pair through the pool's lists.
	{Name: "pool_vmm_holes", Variant: true, alone: func(dev gpu.Device, _ Options) (mr.Resource, error) {
		return newPoolOverVirtual(dev, mr.PoolOptions{PackHoles: true})
	}},
	// pool_vmm_holes_pair is pool_vmm_holes that keeps a pair's block in
	// the quick cache (mr.PoolOptions.HolesKeepPair), with SmallAtPeak:
	// its pair through the lists costs what pool_vmm's does, and
	// llama-generate-h100 reaches 1.0086 of peak live where pool_vmm
	// reaches 1.0289, at a granule more on torch-serve-varlen-b.
	{Name: "pool_vmm_holes_pair", Variant: true, alone: func(dev gpu.Device, _ Options) (mr.Resource, error) {
		return newPoolOverVirtual(dev, mr.PoolOptions{PackHoles: true, HolesKeepPair: true, SmallAtPeak: true})
	}},
	{Name: "async_noreturnwait", Variant: true, alone: func(dev gpu.Device, o Options) (mr.Resource, error) {
		return newAsync(dev, o, true)
	}},
	{Name: "hostpool", Host: true, alone: func(dev gpu.Device, _ Options) (mr.Resource, error) {
		return mr.NewHostPool(dev), nil
	}},
	{Name: "hostpool_driver", Host: true, alone: func(dev gpu.Device, o Options) (mr.Resource, error) {
		opts := mr.DriverHostPoolOptions{}
		if o.KeepReserved {
			opts.ReleaseThreshold = keptBytes
		}
		return mr.NewDriverHostPool(dev, opts)
	}},
}

// newAsync is an Async on a driver pool of its own.
func newAsync(dev gpu.Device, o Options, noReturnWait bool) (*mr.Async, error) {
	opts := mr.AsyncOptions{OwnPool: true, NoReturnWait: noReturnWait}
	if o.KeepReserved {
		opts.ReleaseThreshold = keptBytes
	}
	return mr.NewAsync(dev, opts)
}

// poolOverVirtual is a Pool whose chunks are mapped into a Virtual range;
// Close closes the pool, waits for the chunk frees it enqueued, and frees
// the range. The Virtual waits for decommits (WaitForDecommits), so that
// the pool's figures on a trace are the same on every run and on the
// simulator and the card.
type poolOverVirtual struct {
	*mr.Pool
	up *mr.Virtual
}

func newPoolOverVirtual(dev gpu.Device, opts mr.PoolOptions) (mr.Resource, error) {
	up, err := mr.NewVirtual(dev, mr.VirtualOptions{WaitForDecommits: true})
	if err != nil {
		return nil, err
	}
	p, err := mr.NewPool(up, opts)
	if err != nil {
		return nil, errors.Join(err, up.Close())
	}
	return poolOverVirtual{p, up}, nil
}

func (r poolOverVirtual) Close() error {
	if err := r.Pool.Close(); err != nil {
		return err
	}
	return errors.Join(r.up.ReleaseContext(context.Background()), r.up.Close())
}

// Resources returns every entry of the table, in the order of All.
func Resources() []Resource { return slices.Clone(table) }

// Lookup returns the entry called name.
func Lookup(name string) (Resource, bool) {
	i := slices.IndexFunc(table, func(r Resource) bool { return r.Name == name })
	if i < 0 {
		return Resource{}, false
	}
	return table[i], true
}

// New builds the resource called name on dev, as Resource.New does. A
// name that is not in the table is an error matching ErrUnknown.
func New(name string, dev gpu.Device, o Options) (mr.Resource, func() error, error) {
	r, ok := Lookup(name)
	if !ok {
		return nil, nil, fmt.Errorf("registry: %w %q (want one of %s)", ErrUnknown, name, strings.Join(All(), ", "))
	}
	return r.New(dev, o)
}

// Suballocator reports whether the resource draws from an upstream
// (Options.Upstream).
func (r Resource) Suballocator() bool { return r.over != nil }

// New builds a fresh resource on dev and returns with it the function
// that closes it and, for a suballocator, its upstream after it. Call
// closeFn once, after every allocation was freed. On error nothing is left
// open.
func (r Resource) New(dev gpu.Device, o Options) (res mr.Resource, closeFn func() error, err error) {
	if r.over == nil {
		if res, err = r.alone(dev, o); err != nil {
			return nil, nil, err
		}
		return res, closer(res), nil
	}
	up, closeUp, err := newUpstream(dev, o)
	if err != nil {
		return nil, nil, fmt.Errorf("upstream: %w", err)
	}
	if o.WrapUpstream != nil {
		up = o.WrapUpstream(up)
	}
	if res, err = r.over(up, o); err != nil {
		return nil, nil, errors.Join(err, closeUp())
	}
	closeRes := closer(res)
	return res, func() error { return errors.Join(closeRes(), closeUp()) }, nil
}

// newUpstream builds the upstream o names, and the function that closes
// it.
func newUpstream(dev gpu.Device, o Options) (mr.Resource, func() error, error) {
	switch o.Upstream {
	case UpstreamDirect:
		return mr.NewDirect(dev), noClose, nil
	case UpstreamAsync:
		up, err := newAsync(dev, o, false)
		if err != nil {
			return nil, nil, err
		}
		return up, up.Close, nil
	}
	return nil, nil, fmt.Errorf("%w %d", ErrUpstream, o.Upstream)
}

// closer returns r's Close method, or a function that does nothing if r
// holds nothing to release.
func closer(r mr.Resource) func() error {
	if c, ok := r.(interface{ Close() error }); ok {
		return c.Close
	}
	return noClose
}

func noClose() error { return nil }
