// usageMeter: the Usage counters of a resource, lock-free.
//
// Invariants: used and reserved are the sums of what was added and not yet
// subtracted; each peak is at least its current value at every instant a
// reader can observe (a peak is raised before the add that caused it
// returns). Adds and subtracts are single atomic operations, so a resource
// can keep them on its hot path without a lock.

package mr

import "sync/atomic"

type usageMeter struct {
	reserved, used         atomic.Uint64
	peakReserved, peakUsed atomic.Uint64
}

func raisePeak(peak *atomic.Uint64, v uint64) {
	for {
		p := peak.Load()
		if v <= p || peak.CompareAndSwap(p, v) {
			return
		}
	}
}

func (m *usageMeter) addUsed(n int) { raisePeak(&m.peakUsed, m.used.Add(uint64(n))) }
func (m *usageMeter) subUsed(n int) { m.used.Add(-uint64(n)) }
func (m *usageMeter) addReserved(n int) {
	raisePeak(&m.peakReserved, m.reserved.Add(uint64(n)))
}
func (m *usageMeter) subReserved(n int) { m.reserved.Add(-uint64(n)) }

func (m *usageMeter) snapshot() Usage {
	return Usage{
		Reserved:     m.reserved.Load(),
		Used:         m.used.Load(),
		PeakReserved: m.peakReserved.Load(),
		PeakUsed:     m.peakUsed.Load(),
	}
}

// resetPeaks lowers each peak to its current value.
func (m *usageMeter) resetPeaks() {
	m.peakReserved.Store(m.reserved.Load())
	m.peakUsed.Store(m.used.Load())
}
