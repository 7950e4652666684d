// A collector for a whole stack of resources in one call: ForChain finds
// in the stack (mr.Walk, through adaptors and suballocators) what the
// Collector exports and labels it with the device.

package mrprom

import (
	"errors"
	"maps"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/streamalloc/streamalloc/mr"
)

// ForChain returns a collector of r's stack: the nearest Stats adaptor,
// the nearest resource below it (or in the stack, without one) that
// reports Usage and is not an adaptor passing its upstream's usage on
// (the pool, the driver pool, the resource itself), and the nearest Pool's
// counters, as NewCollector exports them. Every metric carries the label
// device="<ordinal>" (unless opts.ConstLabels sets device itself); give
// collectors of several stacks of one device another label to tell them
// apart. opts.Usage and opts.Pool, if set, take the place of what ForChain
// finds. A stack with none of the three is an error.
func ForChain(r mr.Resource, opts Options) (*Collector, error) {
	if r == nil {
		return nil, errors.New("mrprom: nil resource")
	}
	var stats *mr.Stats
	var usage mr.UsageReporter
	var pool *mr.Pool
	for _, res := range mr.Walk(r) {
		switch v := res.(type) {
		case *mr.Stats:
			if stats == nil {
				stats = v
			}
			continue // its Usage is its own count over its upstream's reserve
		case *mr.Pool:
			if pool == nil {
				pool = v
			}
		}
		if ur, ok := res.(mr.UsageReporter); ok && usage == nil {
			usage = ur
		}
	}
	if opts.Usage == nil && usage != nil {
		opts.Usage = usage
	}
	if opts.Pool == nil && pool != nil {
		opts.Pool = pool
	}
	labels := prometheus.Labels{}
	maps.Copy(labels, opts.ConstLabels)
	if _, ok := labels["device"]; !ok {
		if dev := r.Device(); dev != nil {
			labels["device"] = strconv.Itoa(dev.Ordinal())
		}
	}
	opts.ConstLabels = labels
	return NewCollector(stats, opts)
}
