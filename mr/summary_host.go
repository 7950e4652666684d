// Statistics and the summary of the resources of pinned host memory,
// HostPool and DriverHostPool, in the form StatsOf gives device chains.
//
// They are not Resources (they hand out []byte, not device pointers), so
// they have a StatsOf of their own: a chain of one level, named "host
// pool" or "driver host pool", with the resource's Usage and, for a
// HostPool, its counters (LevelStats.Host). LevelStats.Resource is nil.
// The device is the one whose context the memory is registered with; its
// Total and Free are the device's memory, for the reader's orientation.

package mr

import (
	"strings"

	"github.com/streamalloc/streamalloc/gpu"
)

// HostResource is a resource of pinned host memory: *HostPool or
// *DriverHostPool.
type HostResource interface {
	Device() gpu.Device
	Usage() Usage
}

// HostStatsOf reads the statistics of r. A nil r has none: the result is
// empty.
func HostStatsOf(r HostResource) ChainStats {
	var cs ChainStats
	if r == nil {
		return cs
	}
	cs.Device = deviceMemoryOf(r.Device())
	u := r.Usage()
	l := LevelStats{Name: "driver host pool", Usage: &u}
	if hp, ok := r.(*HostPool); ok {
		st := hp.Stats()
		l.Name, l.Host = "host pool", &st
	}
	cs.Levels = []LevelStats{l}
	return cs
}

// HostSummary returns the summary text of r, as Summary does for a chain
// of device resources.
func HostSummary(r HostResource) string {
	var b strings.Builder
	HostStatsOf(r).WriteSummary(&b)
	return b.String()
}
