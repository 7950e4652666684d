package pluggable

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/mr/registry"
)

func TestParseConfig(t *testing.T) {
	d := DefaultConfig
	with := func(f func(*Config)) Config { c := d; f(&c); return c }
	for _, c := range []struct {
		in   string
		want Config
	}{
		{"", with(func(c *Config) { c.Upstream, c.MappedSlack, c.SmallAtPeak = "vmm", true, true })},
		{"  ", with(func(c *Config) { c.Upstream, c.MappedSlack, c.SmallAtPeak = "vmm", true, true })},
		{"pool", d},
		{" pool , release_threshold = 2GiB ", with(func(c *Config) { c.ReleaseThreshold = 2 << 30 })},
		{"pool,chunk_size=32M,initial_size=1g,max_size=1T,upstream=async", with(func(c *Config) {
			c.ChunkSize, c.InitialSize, c.MaxSize, c.Upstream = 32<<20, 1<<30, 1<<40, "async"
		})},
		{"async,pool=current,release_threshold=0", with(func(c *Config) { c.Kind, c.AsyncPool, c.SplitBig = "async", "current", false })},
		{"async,pool=own", with(func(c *Config) { c.Kind, c.AsyncPool, c.SplitBig = "async", "own", false })},
		{"backend=sim,sim_capacity=256MiB", with(func(c *Config) { c.Backend, c.SimCapacity = "sim", 256<<20 })},
		{"pool,log=/tmp/a=b.csv,track", with(func(c *Config) { c.Log, c.Track = "/tmp/a=b.csv", true })},
		{"track=false", d},
		{"release_threshold=12345", with(func(c *Config) { c.ReleaseThreshold = 12345 })},
		{"release_threshold=3k", with(func(c *Config) { c.ReleaseThreshold = 3 << 10 })},
		{"pool,split_big", d},
		{"split_big=true,track", with(func(c *Config) { c.Track = true })},
		{"pool,split_big=0", with(func(c *Config) { c.SplitBig = false })},
		{"pool,split_big=false,upstream=async", with(func(c *Config) { c.SplitBig, c.Upstream = false, "async" })},
		{"async", with(func(c *Config) { c.Kind, c.SplitBig = "async", false })},
		{"async,split_big=false", with(func(c *Config) { c.Kind, c.SplitBig = "async", false })},
		{"pool,upstream=vmm", with(func(c *Config) { c.Upstream = "vmm" })},
		{"upstream=vmm,max_size=4G,release_threshold=1G", with(func(c *Config) {
			c.Upstream, c.MaxSize, c.ReleaseThreshold = "vmm", 4<<30, 1<<30
		})},
		{"pool,upstream=direct", d},
		{"pool,upstream=vmm,wait_decommits", with(func(c *Config) { c.Upstream, c.WaitDecommits = "vmm", true })},
		{"wait_decommits=true,upstream=vmm", with(func(c *Config) { c.Upstream, c.WaitDecommits = "vmm", true })},
		{"pool,upstream=vmm,wait_decommits=false", with(func(c *Config) { c.Upstream = "vmm" })},
		{"pool,upstream=vmm,pieces=1", with(func(c *Config) { c.Upstream, c.Pieces = "vmm", 1 })},
		{"pieces=4,upstream=vmm,mapped_slack", with(func(c *Config) { c.Upstream, c.Pieces, c.MappedSlack = "vmm", 4, true })},
		{"pool,upstream=vmm,mapped_slack", with(func(c *Config) { c.Upstream, c.MappedSlack = "vmm", true })},
		{"pool,upstream=vmm,mapped_slack,small_at_peak", with(func(c *Config) { c.Upstream, c.MappedSlack, c.SmallAtPeak = "vmm", true, true })},
		{"small_at_peak=true,upstream=vmm", with(func(c *Config) { c.Upstream, c.SmallAtPeak = "vmm", true })},
		{"small_at_peak=false,upstream=vmm", with(func(c *Config) { c.Upstream = "vmm" })},
		{"pool,upstream=vmm,wait_decommits,small_at_peak", with(func(c *Config) { c.Upstream, c.WaitDecommits, c.SmallAtPeak = "vmm", true, true })},
		{"mapped_slack=false,upstream=vmm", with(func(c *Config) { c.Upstream = "vmm" })},
		{"pool,upstream=vmm,in_place=false", with(func(c *Config) { c.Upstream, c.Chunked = "vmm", true })},
		{"in_place=0,upstream=vmm,release_threshold=1G", with(func(c *Config) {
			c.Upstream, c.Chunked, c.ReleaseThreshold = "vmm", true, 1<<30
		})},
		{"pool,upstream=vmm,in_place=false,wait_frees", with(func(c *Config) { c.Upstream, c.Chunked, c.WaitFrees = "vmm", true, true })},
		{"wait_frees=false,in_place=false,upstream=vmm", with(func(c *Config) { c.Upstream, c.Chunked = "vmm", true })},
		{"pool,upstream=vmm,in_place", with(func(c *Config) { c.Upstream = "vmm" })},
		{"upstream=vmm,in_place=true,pieces=2", with(func(c *Config) { c.Upstream, c.Pieces = "vmm", 2 })},
		{"pool,split_giant", with(func(c *Config) { c.SplitGiant = true })},
		{"split_giant=false", d},
		{"pool,upstream=vmm,in_place=false,split_giant", with(func(c *Config) { c.Upstream, c.Chunked, c.SplitGiant = "vmm", true, true })},
		{"pool,slack=0.02", with(func(c *Config) { c.Slack = 0.02 })},
		{"slack=1,split_giant", with(func(c *Config) { c.Slack, c.SplitGiant = 1, true })},
		{"pool,slack=0", d},
		{"pool,slack=-0", d},
		{"pool,slack=3e-2,upstream=async", with(func(c *Config) { c.Slack, c.Upstream = 0.03, "async" })},
		{"pool,upstream=vmm,in_place=false,slack=.005", with(func(c *Config) { c.Upstream, c.Chunked, c.Slack = "vmm", true, 0.005 })},
	} {
		got, err := ParseConfig(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseConfig(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, in := range []string{
		"pool,",                                      // empty item
		",pool",                                      // empty item
		"arena",                                      // unknown kind (a bare key)
		"pool,async",                                 // a kind not first
		"colour=blue",                                // unknown key
		"backend=rocm",                               // bad choice
		"upstream=managed",                           // bad choice
		"release_threshold=",                         // no number
		"release_threshold=-1",                       // negative
		"release_threshold=1.5G",                     // not an integer
		"release_threshold=3EiB",                     // unknown unit
		"release_threshold=99999999999T",             // too large
		"chunk_size",                                 // no value
		"log=",                                       // empty path
		"track=maybe",                                // not a boolean
		"split_giant=maybe",                          // not a boolean
		"async,split_giant",                          // an option of pool
		"pool,split_big=false,split_giant",           // needs split_big
		"pool,upstream=vmm,split_giant",              // growth in place has no giant chunks
		"split_big=2",                                // not a boolean
		"async,split_big",                            // pool option on async
		"async,chunk_size=8M",                        // pool option on async
		"pool,pool=own",                              // async option on pool
		"sim_capacity=1G",                            // without backend=sim
		"upstream=VMM",                               // names are lower case
		"upstream=virtual",                           // not a resource name
		"upstream",                                   // no value
		"async,upstream=vmm",                         // pool option on async
		"async,upstream=async",                       // pool option on async
		"pool,wait_decommits",                        // vmm option without upstream=vmm
		"pool,upstream=async,wait_decommits=1",       // the same
		"upstream=vmm,wait_decommits=soon",           // not a boolean
		"pool,mapped_slack",                          // vmm option without upstream=vmm
		"async,mapped_slack",                         // the same
		"upstream=vmm,mapped_slack=much",             // not a boolean
		"pool,pieces=1",                              // vmm option without upstream=vmm
		"upstream=vmm,pieces=0",                      // not positive
		"upstream=vmm,pieces=-2",                     // not positive
		"upstream=vmm,pieces=1.5",                    // not a whole number
		"upstream=vmm,pieces=2000000",                // above maxPieces
		"upstream=vmm,pieces",                        // no value
		"pool,in_place=false",                        // vmm option without upstream=vmm
		"upstream=async,in_place",                    // the same
		"async,in_place=false",                       // the same
		"upstream=vmm,in_place=no",                   // not a boolean
		"upstream=vmm,in_place=false,mapped_slack",   // growth-in-place option on chunks
		"upstream=vmm,in_place=false,pieces=1",       // the same
		"wait_decommits,upstream=vmm,in_place=false", // the same
		"pool,wait_frees",                            // an option of in_place=false
		"upstream=vmm,wait_frees",                    // the same
		"upstream=vmm,in_place=true,wait_frees",      // the same
		"upstream=vmm,in_place=false,wait_frees=yes", // not a boolean
		"pool,slack=-0.01",                           // negative
		"pool,slack=1.5",                             // above MaxSlack
		"pool,slack=lots",                            // not a number
		"pool,slack=NaN",                             // not a number from 0 to 1
		"pool,slack=Inf",                             // the same
		"pool,slack=",                                // no number
		"pool,slack",                                 // no value
		"async,slack=0.02",                           // an option of pool
		"pool,upstream=vmm,slack=0.02",               // growth in place: mapped_slack is its margin
		"pool,small_at_peak",                         // vmm option without upstream=vmm
		"async,small_at_peak",                        // the same
		"upstream=vmm,small_at_peak=often",           // not a boolean
		"upstream=vmm,in_place=false,small_at_peak",  // growth-in-place option on chunks
	} {
		if c, err := ParseConfig(in); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseConfig(%q) = %+v, %v; want an error matching ErrConfig", in, c, err)
		}
	}
}

// TestParseConfigErrorText pins the messages a user reads for a bad
// upstream.
func TestParseConfigErrorText(t *testing.T) {
	for in, want := range map[string]string{
		"pool,upstream=vmmm":                        `pluggable: bad configuration: "upstream=vmmm": want one of direct, async, vmm`,
		"async,upstream=vmm":                        `pluggable: bad configuration: upstream= is an option of pool, not async`,
		"pool,upstream":                             `pluggable: bad configuration: "upstream": want key=value`,
		"pool,upstream=vmm,, ":                      `pluggable: bad configuration: empty item 3 in "pool,upstream=vmm,, "`,
		"pool,wait_decommits":                       `pluggable: bad configuration: wait_decommits is an option of upstream=vmm`,
		"pool,mapped_slack":                         `pluggable: bad configuration: mapped_slack is an option of upstream=vmm`,
		"upstream=vmm,in_place=false,small_at_peak": `pluggable: bad configuration: small_at_peak is an option of upstream=vmm growing in place`,
		"pool,pieces=2":                             `pluggable: bad configuration: pieces= is an option of upstream=vmm`,
		"upstream=vmm,pieces=0":                     `pluggable: bad configuration: "pieces=0": want a whole number from 1 to 1048576`,
		"pool,in_place=false":                       `pluggable: bad configuration: in_place is an option of upstream=vmm`,
		"upstream=vmm,wait_frees":                   `pluggable: bad configuration: wait_frees is an option of upstream=vmm,in_place=false`,
		"upstream=vmm,in_place=false,mapped_slack":  `pluggable: bad configuration: wait_decommits, mapped_slack and pieces= are options of growth in place, not of in_place=false`,
		"pool,slack=-0.01":                          `pluggable: bad configuration: "slack=-0.01": want a number from 0 to 1`,
		"pool,slack=1.5":                            `pluggable: bad configuration: "slack=1.5": want a number from 0 to 1`,
		"pool,slack=lots":                           `pluggable: bad configuration: "slack=lots": want a number from 0 to 1`,
		"pool,slack=NaN":                            `pluggable: bad configuration: "slack=NaN": want a number from 0 to 1`,
		"pool,slack":                                `pluggable: bad configuration: "slack": want key=value`,
		"async,slack=0.02":                          `pluggable: bad configuration: slack= is an option of pool over chunks (not async, not upstream=vmm growing in place, where mapped_slack is the margin)`,
		"pool,upstream=vmm,slack=0.02":              `pluggable: bad configuration: slack= is an option of pool over chunks (not async, not upstream=vmm growing in place, where mapped_slack is the margin)`,
	} {
		_, err := ParseConfig(in)
		if !errors.Is(err, ErrConfig) || err.Error() != want {
			t.Errorf("ParseConfig(%q): %v; want %s", in, err, want)
		}
	}
}

// TestUpstreamsAreRegistryNames: the upstream option names resources as
// package mr/registry does, so that one word means one resource in the
// command's --resource lists and in STREAMALLOC_CONF.
func TestUpstreamsAreRegistryNames(t *testing.T) {
	for _, name := range Upstreams {
		if _, ok := registry.Lookup(name); !ok {
			t.Errorf("upstream %q is not a resource of mr/registry", name)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{"0": 0, "1": 1, "2k": 2 << 10, "2K": 2 << 10, "2KiB": 2 << 10,
		"5m": 5 << 20, "5MiB": 5 << 20, "7G": 7 << 30, "1TiB": 1 << 40} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

// FuzzParseConfig: ParseConfig never panics, every error matches
// ErrConfig, and what it accepts prints to a string that parses back to
// the same configuration.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{"", "pool", "async,pool=current", "pool,release_threshold=2GiB,track", "pool,split_big=false", "async,split_big=0", "pool,upstream=vmm,max_size=1G",
		"pool,upstream=vmm,wait_decommits", "pool,upstream=vmm,mapped_slack", "pool,upstream=vmm,pieces=2", "pool,upstream=vmm,in_place=false", "pool,upstream=vmm,in_place=false,wait_frees", "pool,slack=0.02", "pool,split_giant,slack=1e-3", "backend=sim,sim_capacity=1M,log=x", "pool,,", "=", "k=v=w"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseConfig(s)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("ParseConfig(%q): error %v does not match ErrConfig", s, err)
			}
			return
		}
		back, err := ParseConfig(c.String())
		if err != nil || back != c {
			t.Fatalf("ParseConfig(%q) = %+v, printed %q, parsed back %+v, %v", s, c, c.String(), back, err)
		}
	})
}

// TestConfigStringSlack: slack= prints as the shortest number that parses
// back to the same value, and not at all when zero.
func TestConfigStringSlack(t *testing.T) {
	for in, want := range map[string]string{
		"pool,slack=3e-2":          "pool,slack=0.03",
		"pool,slack=0.020":         "pool,slack=0.02",
		"pool,slack=0":             "pool",
		"pool,split_giant,slack=1": "pool,split_giant,slack=1",
	} {
		c, err := ParseConfig(in)
		if err != nil || c.String() != want {
			t.Errorf("ParseConfig(%q).String() = %q, %v; want %q", in, c.String(), err, want)
		}
	}
}
