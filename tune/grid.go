// The grid of settings a tuning run replays.
//
// Each resource's grid holds its defaults (the zero options) and the
// values around them that change what it reserves: the pool's chunk size
// (what a growth reserves for small requests), its release threshold and
// whether big requests split larger free blocks; binning's largest bin
// (what goes to the upstream whole) and its chunk size in blocks; the
// arena's superblock size and the largest request it serves; the driver
// pool's release threshold and reuse policies. The grid is a product of
// a few values per option, so its size stays in the tens: a replay of a
// trace of ten thousand events on the simulator takes tens of
// milliseconds, and every setting is replayed on every trace.

package tune

import (
	"fmt"
	"slices"

	"github.com/streamalloc/streamalloc/mr"
)

// Defaults returns the default setting of each resource of names (the
// zero options), in the order of names.
func Defaults(names []string) []Setting {
	out := make([]Setting, 0, len(names))
	for _, n := range names {
		out = append(out, Setting{Resource: n})
	}
	return out
}

// Grid returns the settings a tuning run replays for the resources of
// names, in the order of names, each resource's defaults first. A name
// that is not in Resources is an error matching ErrResource.
func Grid(names []string) ([]Setting, error) {
	var out []Setting
	for _, n := range names {
		if !slices.Contains(Resources, n) {
			return nil, fmt.Errorf("%w %q", ErrResource, n)
		}
		out = append(out, Setting{Resource: n})
		for _, s := range grids[n]() {
			if s != (Setting{Resource: n}) {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

const mib = 1 << 20

var grids = map[string]func() []Setting{
	"pool": func() []Setting {
		var out []Setting
		for _, chunk := range []int{2 * mib, 8 * mib, 32 * mib, 128 * mib} {
			for _, thr := range []int{0, 256 * mib} {
				for _, split := range []bool{false, true} {
					c := chunk
					if c == mr.DefaultPoolChunkSize {
						c = 0 // the default, spelled as users leave it
					}
					out = append(out, Setting{Resource: "pool", Pool: PoolSetting{ChunkSize: c, ReleaseThreshold: thr, SplitBig: split}})
				}
			}
		}
		return out
	},
	"binning": func() []Setting {
		var out []Setting
		for _, maxSize := range []int{64 << 10, 256 << 10, 4 * mib} {
			for _, blocks := range []int{0, 4, 64} {
				out = append(out, Setting{Resource: "binning", Binning: BinningSetting{MinSize: 256, MaxSize: maxSize, BlocksPerChunk: blocks}})
			}
		}
		for _, blocks := range []int{4, 64} {
			out = append(out, Setting{Resource: "binning", Binning: BinningSetting{BlocksPerChunk: blocks}})
		}
		return out
	},
	"arena": func() []Setting {
		var out []Setting
		for _, sb := range []int{1 * mib, 4 * mib, 16 * mib, 64 * mib} {
			for _, div := range []int{4, 2, 1} {
				a := ArenaSetting{SuperblockSize: sb, LargeSize: sb / div}
				if sb == 4*mib {
					a.SuperblockSize = 0
				}
				if div == 2 {
					a.LargeSize = 0 // the default, SuperblockSize/2
				}
				out = append(out, Setting{Resource: "arena", Arena: a})
			}
		}
		return out
	},
	"async": func() []Setting {
		var out []Setting
		for _, thr := range []uint64{0, 1 << 40} { // 1 TiB: keep everything
			for _, off := range []mr.ReusePolicy{0, mr.ReuseAllowOpportunistic, mr.ReuseAllowInternalDependencies,
				mr.ReuseAllowOpportunistic | mr.ReuseAllowInternalDependencies} {
				out = append(out, Setting{Resource: "async", Async: AsyncSetting{ReleaseThreshold: thr, DisableReuse: off}})
			}
		}
		return out
	},
}
