// A Setting is one resource with one choice of its options: what a tuning
// run replays, and what it prints for the winner three ways (a short
// description, the Go code that builds it, and the STREAMALLOC_CONF string
// where the pluggable allocator's grammar can express it).
//
// Suballocators (pool, binning, arena) are built over mr.Direct, as
// `streamalloc replay --upstream direct` builds them, so the reserved bytes
// a replay reports are all the device memory they hold; async is an
// mr.Async on a driver pool of its own. The zero options of each resource
// are its defaults: Setting{Resource: "pool"} replays exactly what
// `streamalloc replay --upstream direct --resource pool` does.

package tune

import (
	"errors"
	"fmt"
	"strings"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// ErrResource is the error, wrapped, of a Setting whose Resource is not
// one that tune knows.
var ErrResource = errors.New("tune: unknown resource")

// Resources are the resources a Setting can name, in the order a tuning
// run lists them.
var Resources = []string{"pool", "binning", "arena", "async"}

// Setting is a resource and the options it is built with. Only the
// options of Resource are read.
type Setting struct {
	// Resource is "pool", "binning", "arena" or "async".
	Resource string `json:"resource"`
	// Pool: ChunkSize, ReleaseThreshold and SplitBig are tuned.
	Pool PoolSetting `json:"pool,omitzero"`
	// Binning: the range of the power-of-two bins and their chunk size.
	Binning BinningSetting `json:"binning,omitzero"`
	// Arena: the superblock size and the largest request served from it.
	Arena ArenaSetting `json:"arena,omitzero"`
	// Async: the driver pool's release threshold and reuse policies.
	Async AsyncSetting `json:"async,omitzero"`
}

// PoolSetting is the tuned part of mr.PoolOptions.
type PoolSetting struct {
	ChunkSize        int  `json:"chunk_size,omitempty"`
	ReleaseThreshold int  `json:"release_threshold,omitempty"`
	SplitBig         bool `json:"split_big,omitempty"`
}

// BinningSetting is the tuned part of mr.BinningOptions.
type BinningSetting struct {
	MinSize        int `json:"min_size,omitempty"`
	MaxSize        int `json:"max_size,omitempty"`
	BlocksPerChunk int `json:"blocks_per_chunk,omitempty"`
}

// ArenaSetting is mr.ArenaOptions.
type ArenaSetting struct {
	SuperblockSize int `json:"superblock_size,omitempty"`
	LargeSize      int `json:"large_size,omitempty"`
}

// AsyncSetting is the tuned part of mr.AsyncOptions (on a pool of the
// resource's own).
type AsyncSetting struct {
	// ReleaseThreshold is the pool's release threshold (0: the driver's
	// default, release everything idle at each synchronization).
	ReleaseThreshold uint64 `json:"release_threshold,omitempty"`
	// DisableReuse turns reuse policies off.
	DisableReuse mr.ReusePolicy `json:"disable_reuse,omitempty"`
}

// Build makes the resource on dev, and the function that closes it (and
// its upstream). Call closeFn once, after every allocation was freed.
func (s Setting) Build(dev gpu.Device) (res mr.Resource, closeFn func() error, err error) {
	switch s.Resource {
	case "pool":
		p, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{
			ChunkSize: s.Pool.ChunkSize, ReleaseThreshold: s.Pool.ReleaseThreshold, SplitBig: s.Pool.SplitBig})
		if err != nil {
			return nil, nil, fmt.Errorf("tune: %v: %w", s, err)
		}
		return p, p.Close, nil
	case "binning":
		b, err := mr.NewBinning(mr.NewDirect(dev), mr.BinningOptions{
			MinSize: s.Binning.MinSize, MaxSize: s.Binning.MaxSize, BlocksPerChunk: s.Binning.BlocksPerChunk})
		if err != nil {
			return nil, nil, fmt.Errorf("tune: %v: %w", s, err)
		}
		return b, b.Close, nil
	case "arena":
		a, err := mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{
			SuperblockSize: s.Arena.SuperblockSize, LargeSize: s.Arena.LargeSize})
		if err != nil {
			return nil, nil, fmt.Errorf("tune: %v: %w", s, err)
		}
		return a, closer(a), nil
	case "async":
		a, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true,
			ReleaseThreshold: s.Async.ReleaseThreshold, DisableReuse: s.Async.DisableReuse})
		if err != nil {
			return nil, nil, fmt.Errorf("tune: %v: %w", s, err)
		}
		return a, a.Close, nil
	}
	return nil, nil, fmt.Errorf("%w %q (want one of %s)", ErrResource, s.Resource, strings.Join(Resources, ", "))
}

// Validated reports whether the simulator's figures for s were checked
// against the card: every suballocator setting (they decide on the host,
// the same bytes on the simulator and the H100), and the driver pool with
// its defaults (BENCHMARKS.md's fidelity table: within 5% on nine traces).
// The driver pool with a reuse policy turned off or a release threshold
// set was not: with opportunistic and internal-dependency reuse off and a
// 1 TiB threshold the H100 reserved 33% less than the simulator on one
// trace and 8% more on another.
func (s Setting) Validated() bool {
	return s.Resource != "async" || s.Async == (AsyncSetting{})
}

// closer returns r's Close method, or a function that does nothing.
func closer(r mr.Resource) func() error {
	if c, ok := r.(interface{ Close() error }); ok {
		return c.Close
	}
	return func() error { return nil }
}

// String describes the setting in one line: the resource and the options
// that differ from its defaults, sizes in binary units.
func (s Setting) String() string {
	var opts []string
	add := func(name string, v int) {
		if v != 0 {
			opts = append(opts, name+"="+Size(uint64(v)))
		}
	}
	switch s.Resource {
	case "pool":
		add("chunk_size", s.Pool.ChunkSize)
		add("release_threshold", s.Pool.ReleaseThreshold)
		if s.Pool.SplitBig {
			opts = append(opts, "split_big")
		}
	case "binning":
		add("min_size", s.Binning.MinSize)
		add("max_size", s.Binning.MaxSize)
		if s.Binning.BlocksPerChunk != 0 {
			opts = append(opts, fmt.Sprintf("blocks_per_chunk=%d", s.Binning.BlocksPerChunk))
		}
	case "arena":
		add("superblock_size", s.Arena.SuperblockSize)
		add("large_size", s.Arena.LargeSize)
	case "async":
		if s.Async.ReleaseThreshold != 0 {
			opts = append(opts, "release_threshold="+Size(s.Async.ReleaseThreshold))
		}
		if d := s.Async.DisableReuse; d != 0 {
			opts = append(opts, "disable_reuse="+reuseNames(d))
		}
	}
	if len(opts) == 0 {
		return s.Resource + " (defaults)"
	}
	return s.Resource + " " + strings.Join(opts, " ")
}

// reuseNames names the policies of p, joined by '+'.
func reuseNames(p mr.ReusePolicy) string {
	var names []string
	for _, x := range []struct {
		p    mr.ReusePolicy
		name string
	}{
		{mr.ReuseFollowEventDependencies, "events"},
		{mr.ReuseAllowOpportunistic, "opportunistic"},
		{mr.ReuseAllowInternalDependencies, "internal"},
	} {
		if p&x.p != 0 {
			names = append(names, x.name)
		}
	}
	return strings.Join(names, "+")
}

// GoCode returns Go statements that build the resource on a gpu.Device
// named dev, into res and err.
func (s Setting) GoCode() string {
	var fields []string
	size := func(name string, v uint64) {
		if v != 0 {
			fields = append(fields, name+": "+goSize(v))
		}
	}
	switch s.Resource {
	case "pool":
		size("ChunkSize", uint64(s.Pool.ChunkSize))
		size("ReleaseThreshold", uint64(s.Pool.ReleaseThreshold))
		if s.Pool.SplitBig {
			fields = append(fields, "SplitBig: true")
		}
		return fmt.Sprintf("res, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{%s})", strings.Join(fields, ", "))
	case "binning":
		size("MinSize", uint64(s.Binning.MinSize))
		size("MaxSize", uint64(s.Binning.MaxSize))
		if s.Binning.BlocksPerChunk != 0 {
			fields = append(fields, fmt.Sprintf("BlocksPerChunk: %d", s.Binning.BlocksPerChunk))
		}
		return fmt.Sprintf("res, err := mr.NewBinning(mr.NewDirect(dev), mr.BinningOptions{%s})", strings.Join(fields, ", "))
	case "arena":
		size("SuperblockSize", uint64(s.Arena.SuperblockSize))
		size("LargeSize", uint64(s.Arena.LargeSize))
		return fmt.Sprintf("res, err := mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{%s})", strings.Join(fields, ", "))
	case "async":
		fields = append(fields, "OwnPool: true")
		size("ReleaseThreshold", s.Async.ReleaseThreshold)
		if d := s.Async.DisableReuse; d != 0 {
			fields = append(fields, "DisableReuse: "+goReuse(d))
		}
		return fmt.Sprintf("res, err := mr.NewAsync(dev, mr.AsyncOptions{%s})", strings.Join(fields, ", "))
	}
	return ""
}

func goReuse(p mr.ReusePolicy) string {
	var names []string
	for _, x := range []struct {
		p    mr.ReusePolicy
		name string
	}{
		{mr.ReuseFollowEventDependencies, "mr.ReuseFollowEventDependencies"},
		{mr.ReuseAllowOpportunistic, "mr.ReuseAllowOpportunistic"},
		{mr.ReuseAllowInternalDependencies, "mr.ReuseAllowInternalDependencies"},
	} {
		if p&x.p != 0 {
			names = append(names, x.name)
		}
	}
	return strings.Join(names, " | ")
}

// Conf returns the STREAMALLOC_CONF string (package pluggable's grammar)
// that builds the setting, and false, with the reason, where the grammar
// cannot express it: it builds pool and async only, and has no key for
// the reuse policies.
func (s Setting) Conf() (string, bool) {
	switch s.Resource {
	case "pool":
		// The pluggable pool splits big blocks unless told not to;
		// the replayed pool does not unless SplitBig is set.
		items := []string{"pool"}
		if s.Pool.ChunkSize != 0 {
			items = append(items, "chunk_size="+Size(uint64(s.Pool.ChunkSize)))
		}
		if s.Pool.ReleaseThreshold != 0 {
			items = append(items, "release_threshold="+Size(uint64(s.Pool.ReleaseThreshold)))
		}
		if !s.Pool.SplitBig {
			items = append(items, "split_big=false")
		}
		return strings.Join(items, ","), true
	case "async":
		if s.Async.DisableReuse != 0 {
			return "the configuration string has no key for the reuse policies", false
		}
		items := []string{"async", "pool=own"}
		if s.Async.ReleaseThreshold != 0 {
			items = append(items, "release_threshold="+Size(s.Async.ReleaseThreshold))
		}
		return strings.Join(items, ","), true
	}
	return "the configuration string builds pool and async only", false
}

// Size writes a byte count in the largest binary unit that divides it
// (the pluggable grammar's suffixes: 8MiB, 1536KiB, 1000).
func Size(n uint64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprint(n)
}

// goSize writes a byte count as a Go constant expression (8 << 20).
func goSize(n uint64) string {
	for _, shift := range []uint{40, 30, 20, 10} {
		if n != 0 && n%(1<<shift) == 0 {
			return fmt.Sprintf("%d << %d", n>>shift, shift)
		}
	}
	return fmt.Sprint(n)
}
