package tune_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/pluggable"
	"github.com/streamalloc/streamalloc/tune"
)

func TestSettingText(t *testing.T) {
	for _, tc := range []struct {
		s            tune.Setting
		str, goCode  string
		conf, noConf string
	}{
		{tune.Setting{Resource: "pool"}, "pool (defaults)",
			"res, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{})", "pool,split_big=false", ""},
		{tune.Setting{Resource: "pool", Pool: tune.PoolSetting{ChunkSize: 32 << 20, ReleaseThreshold: 256 << 20, SplitBig: true}},
			"pool chunk_size=32MiB release_threshold=256MiB split_big",
			"res, err := mr.NewPool(mr.NewDirect(dev), mr.PoolOptions{ChunkSize: 32 << 20, ReleaseThreshold: 256 << 20, SplitBig: true})",
			"pool,chunk_size=32MiB,release_threshold=256MiB", ""},
		{tune.Setting{Resource: "binning", Binning: tune.BinningSetting{MinSize: 256, MaxSize: 64 << 10, BlocksPerChunk: 4}},
			"binning min_size=256 max_size=64KiB blocks_per_chunk=4",
			"res, err := mr.NewBinning(mr.NewDirect(dev), mr.BinningOptions{MinSize: 256, MaxSize: 64 << 10, BlocksPerChunk: 4})",
			"", "the configuration string builds pool and async only"},
		{tune.Setting{Resource: "arena", Arena: tune.ArenaSetting{SuperblockSize: 1 << 20, LargeSize: 1536}},
			"arena superblock_size=1MiB large_size=1536",
			"res, err := mr.NewArena(mr.NewDirect(dev), mr.ArenaOptions{SuperblockSize: 1 << 20, LargeSize: 1536})",
			"", "the configuration string builds pool and async only"},
		{tune.Setting{Resource: "async", Async: tune.AsyncSetting{ReleaseThreshold: 1 << 30}},
			"async release_threshold=1GiB",
			"res, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true, ReleaseThreshold: 1 << 30})",
			"async,pool=own,release_threshold=1GiB", ""},
		{tune.Setting{Resource: "async", Async: tune.AsyncSetting{DisableReuse: mr.ReuseAllowOpportunistic | mr.ReuseAllowInternalDependencies}},
			"async disable_reuse=opportunistic+internal",
			"res, err := mr.NewAsync(dev, mr.AsyncOptions{OwnPool: true, DisableReuse: mr.ReuseAllowOpportunistic | mr.ReuseAllowInternalDependencies})",
			"", "the configuration string has no key for the reuse policies"},
	} {
		if got := tc.s.String(); got != tc.str {
			t.Errorf("String: %q, want %q", got, tc.str)
		}
		if got := tc.s.GoCode(); got != tc.goCode {
			t.Errorf("GoCode:\n got %s\nwant %s", got, tc.goCode)
		}
		conf, ok := tc.s.Conf()
		if ok && conf != tc.conf || !ok && conf != tc.noConf || ok != (tc.conf != "") {
			t.Errorf("%v: Conf %q, %v; want %q / %q", tc.s, conf, ok, tc.conf, tc.noConf)
		}
		if ok {
			if _, err := pluggable.ParseConfig(conf); err != nil {
				t.Errorf("%q does not parse: %v", conf, err)
			}
		}
	}
}

func TestBuildErrors(t *testing.T) {
	dev, _ := newSim()
	if _, _, err := (tune.Setting{Resource: "direct"}).Build(dev); err == nil || !errors.Is(err, tune.ErrResource) {
		t.Errorf("Build(direct): %v, want %v", err, tune.ErrResource)
	}
	if _, _, err := (tune.Setting{Resource: "binning", Binning: tune.BinningSetting{MinSize: -1}}).Build(dev); !errors.Is(err, mr.ErrInvalidSize) {
		t.Errorf("Build(binning min -1): %v, want %v", err, mr.ErrInvalidSize)
	}
}

func TestValidated(t *testing.T) {
	for _, tc := range []struct {
		s    tune.Setting
		want bool
	}{
		{tune.Setting{Resource: "pool", Pool: tune.PoolSetting{ChunkSize: 2 << 20}}, true},
		{tune.Setting{Resource: "binning"}, true},
		{tune.Setting{Resource: "arena", Arena: tune.ArenaSetting{SuperblockSize: 1 << 20}}, true},
		{tune.Setting{Resource: "async"}, true},
		{tune.Setting{Resource: "async", Async: tune.AsyncSetting{ReleaseThreshold: 1 << 40}}, false},
		{tune.Setting{Resource: "async", Async: tune.AsyncSetting{DisableReuse: mr.ReuseAllowOpportunistic}}, false},
	} {
		if got := tc.s.Validated(); got != tc.want {
			t.Errorf("%v: Validated %v, want %v", tc.s, got, tc.want)
		}
	}
	outs := []tune.Outcome{
		{Setting: tune.Setting{Resource: "async", Async: tune.AsyncSetting{ReleaseThreshold: 1 << 40}}, ReservedBytes: 1, NsPerEvent: 1},
		{Setting: tune.Setting{Resource: "pool"}, ReservedBytes: 5, NsPerEvent: 5, Validated: true},
	}
	v := tune.ValidatedOnly(outs)
	if len(v) != 1 || v[0].Setting.Resource != "pool" {
		t.Fatalf("ValidatedOnly: %+v", v)
	}
	if o, _ := tune.LeastReserved(outs, 0); o.Setting.Resource != "async" {
		t.Errorf("LeastReserved over all: %v, want the unvalidated async (it selects among what it is given)", o.Setting)
	}
}
