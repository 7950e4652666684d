// String methods: what %v prints for the statistics and for every
// resource and adaptor of the package, one line a person can read (sizes
// in IEC units, FormatBytes) instead of a struct's internals.
//
// A resource's line is its kind and what it holds now. Every String is
// safe for concurrent use, changes nothing, and takes no lock but the
// ones the statistic it prints takes anyway (Pool.Usage takes each
// stream's lock in turn), so it never calls the device except where
// Usage does (Async reads its pool's attributes).

package mr

import (
	"fmt"
	"strings"
)

// String is "reserved 24.0 MiB (peak 32.0 MiB), used 12.0 MiB (peak 20.0 MiB)".
func (u Usage) String() string {
	return fmt.Sprintf("reserved %s (peak %s), used %s (peak %s)",
		FormatBytes(u.Reserved), FormatBytes(u.PeakReserved), FormatBytes(u.Used), FormatBytes(u.PeakUsed))
}

// String is "12.0 MiB in 2 allocations (peak 20.0 MiB in 5; 64.0 MiB in 9
// in all), 1 refused (1 out of memory)".
func (s StatsSnapshot) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s in %s (peak %s in %d; %s in %d in all)",
		FormatBytes(s.Bytes.Current), plural(s.Allocations.Current, "allocation", "allocations"),
		FormatBytes(s.Bytes.Peak), s.Allocations.Peak, FormatBytes(s.Bytes.Total), s.Allocations.Total)
	if s.Failures != 0 {
		fmt.Fprintf(&b, ", %d refused (%d out of memory)", s.Failures, s.OutOfMemory)
	}
	return b.String()
}

// String is "9 allocations (4 from the quick cache), 7 frees (1
// cross-stream), 3 growths, 1 release, 0 steals, 2 event waits, 3 chunks".
func (s PoolStats) String() string {
	return fmt.Sprintf("%s (%d from the quick cache), %s (%d cross-stream), %s, %s, %s, %s, %s",
		plural(s.Allocations, "allocation", "allocations"), s.QuickHits,
		plural(s.Frees, "free", "frees"), s.CrossStreamFrees,
		plural(s.Growths, "growth", "growths"), plural(s.Releases, "release", "releases"),
		plural(s.Steals, "steal", "steals"), plural(s.Waits, "event wait", "event waits"),
		plural(uint64(s.Chunks), "chunk", "chunks"))
}

// String is "out of memory 2 times: 1 recovered, 1 failed; 3 retries,
// 4.0 MiB reaped".
func (c RetryCounts) String() string {
	return fmt.Sprintf("out of memory %s: %d recovered, %d failed; %s, %s reaped",
		plural(c.OutOfMemory, "time", "times"), c.Recovered, c.Failed, plural(c.Retries, "retry", "retries"), FormatBytes(c.Reaped))
}

// String is "24.0 MiB in 3 chunks, 12.0 MiB live, largest free block 8.0 MiB".
func (l PoolLayout) String() string {
	return fmt.Sprintf("%s in %s, %s live, largest free block %s", FormatBytes(l.Reserved()),
		plural(uint64(len(l.Chunks)), "chunk", "chunks"), FormatBytes(l.Bytes[BlockLive]), FormatBytes(l.LargestFree))
}

// String is "live 10.0 MiB in 3 allocations, pending 4.0 MiB in 1 free".
func (p *PendingFrees) String() string {
	lb, pb, la, pf := p.Counts()
	return fmt.Sprintf("live %s in %s, pending %s in %s", FormatBytes(lb),
		plural(la, "allocation", "allocations"), FormatBytes(pb), plural(pf, "free", "frees"))
}

// String is "pool: reserved ..., used ..., 3 chunks".
func (p *Pool) String() string {
	return fmt.Sprintf("pool: %v, %s", p.Usage(), plural(uint64(p.chunks.len()), "chunk", "chunks"))
}

// String is "async: reserved ..., used ...; live ..., pending ...". On the
// default pool the reserved and used bytes count every user of the pool.
func (r *Async) String() string { return fmt.Sprintf("async: %v; %v", r.Usage(), r.pending) }

// String is "direct: reserved ..., used ...".
func (d *Direct) String() string { return "direct: " + d.Usage().String() }

// String is "managed: reserved ..., used ...".
func (m *Managed) String() string { return "managed: " + m.Usage().String() }

// String is "arena: reserved ..., used ...".
func (r *Arena) String() string { return "arena: " + r.Usage().String() }

// String is "binning: reserved ..., used ..., bins 256 B to 1.0 MiB".
func (r *Binning) String() string {
	s := "binning: " + r.Usage().String()
	if len(r.sizes) > 0 {
		s += fmt.Sprintf(", bins %s to %s", FormatBytes(uint64(r.sizes[0])), FormatBytes(uint64(r.sizes[len(r.sizes)-1])))
	}
	return s
}

// String is "fixed_size 4.0 KiB: reserved ..., used ...".
func (r *FixedSize) String() string {
	return fmt.Sprintf("%s %s: %v", r.name, FormatBytes(uint64(r.blockSize)), r.Usage())
}

// String is "stats: 12.0 MiB in 2 allocations (...)".
func (a *Stats) String() string { return "stats: " + a.Snapshot().String() }

// String is "tracking: 2 allocations live (12.0 MiB) from 2 call sites".
func (t *Tracking) String() string {
	ts := t.tracked()
	return fmt.Sprintf("tracking: %s live (%s) from %s", plural(uint64(ts.Live), "allocation", "allocations"),
		FormatBytes(ts.LiveBytes), plural(uint64(ts.CallSites), "call site", "call sites"))
}

// String is "logging: 2 allocations live" (and the write error, if one
// stopped the log).
func (l *Logging) String() string {
	n, _ := l.live.count()
	s := "logging: " + plural(uint64(n), "allocation", "allocations") + " live"
	if err := l.Err(); err != nil {
		s += "; log stopped: " + err.Error()
	}
	return s
}

// String is "limit: 256.0 MiB charged of a 1.0 GiB budget (512.0 MiB in use
// in all, peak 600.0 MiB)".
func (l *Limit) String() string {
	b := l.budget
	return fmt.Sprintf("limit: %s charged of a %s budget (%s in use in all, peak %s)",
		FormatBytes(l.Used()), FormatBytes(b.Limit()), FormatBytes(b.Used()), FormatBytes(b.Peak()))
}

// String is "retry: out of memory 2 times: ...".
func (r *Retry) String() string { return "retry: " + r.Counts().String() }

// String is "aligned to 4.0 KiB: 2 allocations live".
func (a *Aligned) String() string {
	n, _ := a.live.count()
	if a.slots != nil {
		n += a.slots.live()
	}
	return fmt.Sprintf("aligned to %s: %s live", FormatBytes(uint64(a.align)), plural(uint64(n), "allocation", "allocations"))
}
