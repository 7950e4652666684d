// Sets of names, and the parser of the lists that --resource flags take.
//
// A list is comma-separated; white space around a name is dropped; "all"
// stands for the whole Set, in its order; a name given twice (or named
// and covered by "all") is kept once, where it first appears. Every name
// is checked before any is built, so a typo fails before a long run
// starts, and an empty name (an empty list, a stray comma) is a name like
// any other: unknown.

package registry

import (
	"fmt"
	"slices"
	"strings"
)

// A Set is the resource names one command offers, in the order its "all"
// expands to. "all" is every name of the set but the host pools (Every),
// which a command runs only when they are named: page-locking a trace's
// peak, or a benchmark's, takes the host's memory and the driver's time.
type Set []string

// Every is what "all" expands to: the names of s that are not host
// pools (Resource.Host), in s's order.
func (s Set) Every() Set {
	var out Set
	for _, n := range s {
		if r, ok := Lookup(n); !ok || !r.Host {
			out = append(out, n)
		}
	}
	return out
}

// All is every resource of device memory in the table (every entry but
// the Host ones), in table order: what `streamalloc bench` offers, its
// "all", and the order of the benchmark suite.
func All() Set {
	var s Set
	for _, r := range table {
		if !r.Host {
			s = append(s, r.Name)
		}
	}
	return s
}

// Replay is what `streamalloc replay` offers, in the order its "all"
// expands to. fixedsize is not among them: its block size must cover the
// largest request, which a replay does not know before it starts. The
// host pools are: a trace records device allocations, and replayed
// against pinned host memory it studies the pool's size classes,
// stream-ordered reuse and release under the trace's sizes and streams.
func Replay() Set {
	return Set{"direct", "async", "pool", "arena", "binning", "vmm", "pool_vmm", "pool_vmm_holes", "pool_vmm_holes_pair", "hostpool", "hostpool_driver"}
}

// Parse returns the names of the comma-separated list, with "all"
// expanded to s and repeats dropped, in the order they first appear. A
// name that is not in s, the empty name included, is an error matching
// ErrUnknown that lists s.
func (s Set) Parse(list string) ([]string, error) {
	var names []string
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "all":
			names = append(names, s.Every()...)
		case slices.Contains(s, n):
			names = append(names, n)
		default:
			return nil, fmt.Errorf("%w %q (want one of %s, or all)", ErrUnknown, n, strings.Join(s, ", "))
		}
	}
	var uniq []string
	for _, n := range names {
		if !slices.Contains(uniq, n) {
			uniq = append(uniq, n)
		}
	}
	return uniq, nil
}
