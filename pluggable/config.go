// The configuration string: what STREAMALLOC_CONF and sa_configure take.
//
// An empty string stands for Recommended; any other names the items that
// differ from DefaultConfig, where a bare "pool" is the chunked pool over
// cuMemAlloc.
//
// Grammar: items separated by commas; the first item may be a resource
// kind ("pool" or "async"); every other item is key=value, or a bare key
// for a boolean. Sizes are bytes, with an optional binary suffix (k/K/KiB,
// m/M/MiB, g/G/GiB, t/T/TiB). Whitespace around items is ignored. Examples:
//
//	pool
//	pool,release_threshold=2GiB,chunk_size=32MiB
//	async,pool=current
//	pool,backend=sim,sim_capacity=256MiB,log=/tmp/alloc.csv,track
//	pool,split_big=false
//	pool,split_giant
//	pool,slack=0.02
//	pool,upstream=vmm
//	pool,upstream=vmm,wait_decommits
//	pool,upstream=vmm,mapped_slack
//	pool,upstream=vmm,mapped_slack,small_at_peak
//	pool,upstream=vmm,pieces=1
//	pool,upstream=vmm,in_place=false
//	pool,upstream=vmm,in_place=false,wait_frees
//
// Invariant: ParseConfig(c.String()) == c for every Config that
// ParseConfig returned.

package pluggable

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrConfig is matched by every error of a configuration string.
var ErrConfig = errors.New("pluggable: bad configuration")

// Config is a parsed configuration string.
type Config struct {
	// Kind is the resource of each device: "pool" (mr.Pool, the default)
	// or "async" (mr.Async, the driver's pool).
	Kind string
	// Backend is "cuda" (the default) or "sim" (a simulated GPU, for
	// tests of the C ABI without a GPU).
	Backend string
	// SimCapacity is each simulated device's memory (sim only; 0: the
	// simulator's default, 80 GiB).
	SimCapacity uint64
	// Upstream is where a pool takes its memory, by the name of the
	// resource in package mr/registry: "direct" (cuMemAlloc, the
	// default: the pool cuts blocks from chunks, and the reserved bytes
	// are exactly the device memory taken), "async" (a driver pool of its
	// own that keeps what it reserved) or "vmm" (mr.Virtual: physical
	// memory mapped into reserved address ranges, in granules of the
	// device's mapping granularity, 2 MiB on current GPUs; the pool grows
	// each stream's range in place and maps only what its blocks need, so
	// that its reserved bytes, the memory mapped, follow the live bytes
	// closely). Where the driver has no virtual memory management, "vmm"
	// builds the pool over "direct" and Stats.VMMFallback says so.
	Upstream string
	// ChunkSize, InitialSize, MaxSize and ReleaseThreshold are the pool's
	// options (mr.PoolOptions; 0: the defaults). For "async",
	// ReleaseThreshold is the driver pool's release threshold.
	ChunkSize, InitialSize, MaxSize, ReleaseThreshold uint64
	// AsyncPool is the driver pool "async" allocates from: "default"
	// (the default), "current" (cuDeviceGetMemPool) or "own".
	AsyncPool string
	// Log, if not empty, is a file that receives an RMM CSV line for
	// every allocation and free (the memory history; Flush writes what is
	// buffered).
	Log string
	// Track keeps the call stack of every live allocation, for
	// WriteProfile.
	Track bool
	// SplitBig is the pool's mr.PoolOptions.SplitBig: big requests split
	// larger free blocks rather than grow the pool. On by default for
	// pool (split_big=false turns it off), always off for async: the
	// frameworks' training steps repeat with tensors of changing sizes,
	// where the pool without it gives chunks back and grows new ones
	// dozens of times a step (BENCHMARKS.md).
	SplitBig bool
	// SplitGiant is the pool's mr.PoolOptions.SplitGiantAtMark
	// (split_giant; off by default, needs split_big, not an option of
	// async nor of upstream=vmm growing in place): a big request of a
	// size seen before takes a free block of a giant chunk where growing
	// would first give idle chunks back. On the CuPy workload it cuts the
	// default pool's growths and releases in the timed steps from 59+57 to
	// 12+14 at the same reserved bytes; on other workloads it moves
	// reserved bytes both ways (BENCHMARKS.md, "Chunk churn under CuPy").
	SplitGiant bool
	// Slack is the pool's mr.PoolOptions.ReservedSlack (slack=, a number
	// from 0 to MaxSlack; an option of pool over chunks, not of async nor
	// of upstream=vmm growing in place, where mapped_slack is the margin):
	// a growth keeps idle chunks rather than give them back first while
	// the pool reserves at most 1+Slack times its peak of live bytes after
	// it. Zero (the default): the high-water mark of reserved bytes alone.
	// Within 0.03 it leaves the chunk churn of GPT-2 and CuPy at the mark
	// as it is (their growths there are larger than that share of the
	// peak); with split_giant, slack=0.03 ends it on both, at 1.030 of
	// allocated on GPT-2, but raises other recorded workloads' peaks
	// (BENCHMARKS.md, "A slack over peak live for the pool's growth").
	Slack float64
	// WaitDecommits is mr.VirtualOptions.WaitForDecommits of
	// upstream=vmm (an error with any other upstream): a commit of
	// addresses whose memory went to another stream's range waits on the
	// host, at most DecommitWaitLimit, for the work before their
	// decommit, so that the pool's layout and peaks follow from the
	// requests alone. Off by default: a host wait in PyTorch's loop
	// empties the GPU's queue, and on the card the pool over Virtual
	// reserved the same bytes in every process without it
	// (BENCHMARKS.md).
	WaitDecommits bool
	// MappedSlack sets the pool's mr.PoolOptions.MappedSlack to
	// VMMMappedSlack over upstream=vmm (an error with any other
	// upstream): memory that its steps move within their peak stays
	// mapped, up to that share of the peak of used bytes, rather than be
	// decommitted and committed again each step. Off by default: it lets
	// the pool map up to VMMMappedSlack more than the high-water rule
	// alone, and on the replayed compile trace that broke the 1.01 the
	// pool over Virtual keeps there (1.0115 in one run of ten).
	MappedSlack bool
	// SmallAtPeak sets the pool's mr.PoolOptions.SmallAtPeak over
	// upstream=vmm growing in place (an error otherwise): a small request
	// that would grow a small chunk while the pool maps its high-water
	// mark takes mapped free room of its stream's growable range instead
	// (without wait_decommits before giving memory back for a small
	// chunk, with it after). Off by default: replaying autoregressive
	// generation it ends the pool's commits and decommits after the
	// third step (5.2 commits a step without), but it raises the
	// two-stream pipeline trace and resnet50-amp by a granule or two
	// (BENCHMARKS.md, "Generation's commits and small chunks").
	SmallAtPeak bool
	// Pieces sets mr.VirtualOptions.PiecesPerCommit over upstream=vmm (an
	// error with any other upstream): a commit of k granules is mapped
	// as physical allocations of the largest power of two granules not
	// above k/Pieces. Fewer, larger pieces cost fewer driver calls and
	// less device time to reach (memory mapped one granule per
	// allocation copies 11.6% slower on an H100, BENCHMARKS.md), but a
	// piece goes back to the device only whole. Zero: the library's
	// default.
	Pieces int
	// Chunked (in_place=false, an option of upstream=vmm) builds the
	// pool over mr.Virtual as over cuMemAlloc: the pool cuts blocks from
	// chunks and grows and gives back whole chunks, by the default
	// pool's policy, but each chunk is one physical allocation mapped
	// into Virtual's reserved range (cuMemCreate, cuMemMap,
	// cuMemSetAccess) and given back in stream order (an event, then
	// cuMemUnmap once it completed), where cuMemFree waits for the whole
	// device. The options of growth in place (wait_decommits,
	// mapped_slack, pieces=) are errors with it. Off by default:
	// upstream=vmm grows in place (in_place=true).
	Chunked bool
	// WaitFrees is mr.VirtualOptions.WaitForFrees of in_place=false (an
	// error otherwise): a growth of the pool first waits on the host for
	// the work before the chunks it gave back, so that the memory mapped
	// never holds a chunk given back and a new one at once; without it
	// the two overlap for as long as the stream's queue runs (the
	// default pool's cuMemFree waits for the whole device instead).
	WaitFrees bool
}

// DecommitWaitLimit bounds each host wait of wait_decommits
// (mr.VirtualOptions.DecommitWaitLimit): a commit whose decommit's work
// is not done by then is placed elsewhere, as without the option.
const DecommitWaitLimit = 100 * time.Millisecond

// VMMMappedSlack is the pool's mr.PoolOptions.MappedSlack with
// mapped_slack: the pool keeps up to 1% of its peak of used bytes mapped
// above that peak where its steps would otherwise move memory by a
// decommit and a commit each time. Replaying the ResNet-50 training
// recorded on an H100 (testdata), the pool over Virtual then makes no
// commit and no decommit in a steady step (5-7 and 10-16 without it) at
// 1.0096 of peak live (1.018-1.028 without); the training traces never
// needed more than 1% to settle.
const VMMMappedSlack = 0.01

// MaxSlack is the largest slack= (mr.PoolOptions.ReservedSlack allows no
// more): a pool that may reserve twice its peak of live bytes.
const MaxSlack = 1.0

// Upstreams are the values of the upstream option: names of resources of
// package mr/registry, which mean the same there.
var Upstreams = []string{"direct", "async", "vmm"}

// DefaultConfig is what every configuration string but the empty one
// starts from: "pool" is DefaultConfig, the chunked pool over cuMemAlloc.
var DefaultConfig = Config{Kind: "pool", Backend: "cuda", Upstream: "direct", AsyncPool: "default", SplitBig: true}

// Recommended is the configuration an empty string stands for (an unset
// STREAMALLOC_CONF, sa_configure(NULL)): the pool growing in place over
// mapped virtual memory, keeping a margin of mapped memory, with small
// requests at its peak served from mapped room. On the H100 it reserved
// 1.008-1.036 times the peak of allocated bytes on GPT-2, ResNet-50, CuPy
// and generation where the chunked pool reserves 1.030-1.104, and it was
// never shown slower than the chunked pool (BENCHMARKS.md, "The final
// tree of 2026-11-25"). Where the driver has no virtual memory
// management it builds the chunked pool (Stats.VMMFallback says why).
const Recommended = "pool,upstream=vmm,mapped_slack,small_at_peak"

// ParseConfig parses a configuration string; "" (or only spaces) is
// Recommended. Every error matches ErrConfig and names the item.
func ParseConfig(s string) (Config, error) {
	if strings.TrimSpace(s) == "" {
		s = Recommended
	}
	c := DefaultConfig
	c.SplitBig = false // set below: the default of the kind, unless given
	var splitGiven, inPlaceGiven bool
	items := strings.Split(s, ",")
	for i, item := range items {
		item = strings.TrimSpace(item)
		if item == "" {
			if len(items) == 1 {
				break
			}
			return Config{}, fmt.Errorf("%w: empty item %d in %q", ErrConfig, i+1, s)
		}
		key, val, hasVal := strings.Cut(item, "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if i == 0 && !hasVal && (key == "pool" || key == "async") {
			c.Kind = key
			continue
		}
		if err := c.set(key, val, hasVal); err != nil {
			return Config{}, fmt.Errorf("%w: %q: %v", ErrConfig, item, err)
		}
		splitGiven = splitGiven || key == "split_big"
		inPlaceGiven = inPlaceGiven || key == "in_place"
	}
	if !splitGiven {
		c.SplitBig = c.Kind == "pool"
	}
	if c.Kind == "async" && c.ChunkSize+c.InitialSize+c.MaxSize != 0 {
		return Config{}, fmt.Errorf("%w: chunk_size, initial_size and max_size are options of pool, not async", ErrConfig)
	}
	if c.Kind == "async" && c.SplitBig {
		return Config{}, fmt.Errorf("%w: split_big is an option of pool, not async", ErrConfig)
	}
	if c.SplitGiant && (c.Kind != "pool" || !c.SplitBig || (c.Upstream == "vmm" && !c.Chunked)) {
		return Config{}, fmt.Errorf("%w: split_giant is an option of pool with split_big, over chunks (not async, not upstream=vmm growing in place)", ErrConfig)
	}
	if c.Kind == "async" && c.Upstream != DefaultConfig.Upstream {
		return Config{}, fmt.Errorf("%w: upstream= is an option of pool, not async", ErrConfig)
	}
	if c.Kind == "pool" && c.AsyncPool != "default" {
		return Config{}, fmt.Errorf("%w: pool= is an option of async (pool takes upstream=)", ErrConfig)
	}
	if c.Slack != 0 && (c.Kind != "pool" || (c.Upstream == "vmm" && !c.Chunked)) {
		return Config{}, fmt.Errorf("%w: slack= is an option of pool over chunks (not async, not upstream=vmm growing in place, where mapped_slack is the margin)", ErrConfig)
	}
	if c.MappedSlack && c.Upstream != "vmm" {
		return Config{}, fmt.Errorf("%w: mapped_slack is an option of upstream=vmm", ErrConfig)
	}
	if c.SmallAtPeak && (c.Upstream != "vmm" || c.Chunked) {
		return Config{}, fmt.Errorf("%w: small_at_peak is an option of upstream=vmm growing in place", ErrConfig)
	}
	if c.Pieces != 0 && c.Upstream != "vmm" {
		return Config{}, fmt.Errorf("%w: pieces= is an option of upstream=vmm", ErrConfig)
	}
	if c.WaitDecommits && c.Upstream != "vmm" {
		return Config{}, fmt.Errorf("%w: wait_decommits is an option of upstream=vmm", ErrConfig)
	}
	if inPlaceGiven && c.Upstream != "vmm" {
		return Config{}, fmt.Errorf("%w: in_place is an option of upstream=vmm", ErrConfig)
	}
	if c.WaitFrees && !c.Chunked {
		return Config{}, fmt.Errorf("%w: wait_frees is an option of upstream=vmm,in_place=false", ErrConfig)
	}
	if c.Chunked && (c.WaitDecommits || c.MappedSlack || c.Pieces != 0) {
		return Config{}, fmt.Errorf("%w: wait_decommits, mapped_slack and pieces= are options of growth in place, not of in_place=false", ErrConfig)
	}
	if c.Backend != "sim" && c.SimCapacity != 0 {
		return Config{}, fmt.Errorf("%w: sim_capacity needs backend=sim", ErrConfig)
	}
	return c, nil
}

// maxOption bounds sizes, so that every one fits an int.
const maxOption = 1 << 62

// maxPieces bounds pieces=: a commit is never cut finer than a granule a
// piece, which a value this large already means for every commit the
// device's memory allows.
const maxPieces = 1 << 20

func (c *Config) set(key, val string, hasVal bool) error {
	choice := func(dst *string, allowed ...string) error {
		for _, a := range allowed {
			if val == a {
				*dst = val
				return nil
			}
		}
		return fmt.Errorf("want one of %s", strings.Join(allowed, ", "))
	}
	size := func(dst *uint64) error {
		n, err := ParseSize(val)
		if err != nil {
			return err
		}
		*dst = n
		return nil
	}
	flag := func(dst *bool) error {
		if !hasVal {
			*dst = true
			return nil
		}
		b, err := strconv.ParseBool(val)
		if err != nil {
			return errors.New("want a boolean")
		}
		*dst = b
		return nil
	}
	if !hasVal && key != "track" && key != "split_big" && key != "split_giant" && key != "wait_decommits" && key != "mapped_slack" && key != "small_at_peak" && key != "in_place" && key != "wait_frees" {
		return errors.New("want key=value")
	}
	switch key {
	case "backend":
		return choice(&c.Backend, "cuda", "sim")
	case "sim_capacity":
		return size(&c.SimCapacity)
	case "upstream":
		return choice(&c.Upstream, Upstreams...)
	case "chunk_size":
		return size(&c.ChunkSize)
	case "initial_size":
		return size(&c.InitialSize)
	case "max_size":
		return size(&c.MaxSize)
	case "release_threshold":
		return size(&c.ReleaseThreshold)
	case "pool":
		return choice(&c.AsyncPool, "default", "current", "own")
	case "log":
		if val == "" {
			return errors.New("empty path")
		}
		c.Log = val
		return nil
	case "track":
		return flag(&c.Track)
	case "split_big":
		return flag(&c.SplitBig)
	case "split_giant":
		return flag(&c.SplitGiant)
	case "wait_decommits":
		return flag(&c.WaitDecommits)
	case "mapped_slack":
		return flag(&c.MappedSlack)
	case "small_at_peak":
		return flag(&c.SmallAtPeak)
	case "wait_frees":
		return flag(&c.WaitFrees)
	case "in_place":
		inPlace := true
		if err := flag(&inPlace); err != nil {
			return err
		}
		c.Chunked = !inPlace
		return nil
	case "slack":
		f, err := strconv.ParseFloat(val, 64)
		if err != nil || !(f >= 0 && f <= MaxSlack) {
			return fmt.Errorf("want a number from 0 to %g", MaxSlack)
		}
		if f == 0 {
			f = 0 // not -0, which String would not print
		}
		c.Slack = f
		return nil
	case "pieces":
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 || n > maxPieces {
			return fmt.Errorf("want a whole number from 1 to %d", maxPieces)
		}
		c.Pieces = n
		return nil
	}
	return errors.New("unknown key")
}

// ParseSize parses a byte count with an optional binary suffix (k, K,
// KiB, m, M, MiB, g, G, GiB, t, T, TiB). Errors match ErrConfig.
func ParseSize(s string) (uint64, error) {
	num := strings.TrimRightFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	unit := s[len(num):]
	shift := 0
	switch unit {
	case "":
	case "k", "K", "KiB":
		shift = 10
	case "m", "M", "MiB":
		shift = 20
	case "g", "G", "GiB":
		shift = 30
	case "t", "T", "TiB":
		shift = 40
	default:
		return 0, fmt.Errorf("%w: size %q: unknown unit %q", ErrConfig, s, unit)
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || num == "" {
		return 0, fmt.Errorf("%w: size %q: not a number", ErrConfig, s)
	}
	if n > maxOption>>shift {
		return 0, fmt.Errorf("%w: size %q: too large", ErrConfig, s)
	}
	return n << shift, nil
}

// String is the configuration in the grammar of ParseConfig, with only
// the items that differ from DefaultConfig after the kind.
func (c Config) String() string {
	parts := []string{c.Kind}
	add := func(key, val, def string) {
		if val != def {
			parts = append(parts, key+"="+val)
		}
	}
	sz := func(key string, v uint64) {
		if v != 0 {
			parts = append(parts, key+"="+strconv.FormatUint(v, 10))
		}
	}
	add("backend", c.Backend, DefaultConfig.Backend)
	sz("sim_capacity", c.SimCapacity)
	add("upstream", c.Upstream, DefaultConfig.Upstream)
	sz("chunk_size", c.ChunkSize)
	sz("initial_size", c.InitialSize)
	sz("max_size", c.MaxSize)
	sz("release_threshold", c.ReleaseThreshold)
	add("pool", c.AsyncPool, DefaultConfig.AsyncPool)
	add("log", c.Log, "")
	if c.Track {
		parts = append(parts, "track")
	}
	if c.Kind == "pool" && !c.SplitBig {
		parts = append(parts, "split_big=false")
	}
	if c.SplitGiant {
		parts = append(parts, "split_giant")
	}
	if c.Slack != 0 {
		parts = append(parts, "slack="+strconv.FormatFloat(c.Slack, 'g', -1, 64))
	}
	if c.WaitDecommits {
		parts = append(parts, "wait_decommits")
	}
	if c.MappedSlack {
		parts = append(parts, "mapped_slack")
	}
	if c.SmallAtPeak {
		parts = append(parts, "small_at_peak")
	}
	if c.Pieces != 0 {
		parts = append(parts, "pieces="+strconv.Itoa(c.Pieces))
	}
	if c.Chunked {
		parts = append(parts, "in_place=false")
	}
	if c.WaitFrees {
		parts = append(parts, "wait_frees")
	}
	return strings.Join(parts, ",")
}
