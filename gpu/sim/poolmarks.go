// The memory counters every simulated pool keeps, device or host located,
// and the pool attributes that read and reset them: one definition, so
// the two pools answer cuMemPoolGetAttribute and cuMemPoolSetAttribute for
// their counters the same way.

package sim

import "github.com/streamalloc/streamalloc/gpu"

// poolMarks holds a pool's reserved and used bytes and their high-water
// marks. The owning pool's lock guards it.
type poolMarks struct {
	reserved, reservedHigh, used, usedHigh uint64
}

// mark answers the four counter attributes; ok is false for any other.
func (m *poolMarks) mark(a gpu.PoolAttr) (v uint64, ok bool) {
	switch a {
	case gpu.PoolReservedMemCurrent:
		return m.reserved, true
	case gpu.PoolReservedMemHigh:
		return m.reservedHigh, true
	case gpu.PoolUsedMemCurrent:
		return m.used, true
	case gpu.PoolUsedMemHigh:
		return m.usedHigh, true
	}
	return 0, false
}

// resetHigh resets the high-water mark a (PoolReservedMemHigh or
// PoolUsedMemHigh) to the current figure, as the driver does when 0 is
// set; any other value is ErrInvalidValue.
func (m *poolMarks) resetHigh(call string, a gpu.PoolAttr, v uint64) error {
	if v != 0 {
		return driverErrf(call, gpu.ErrInvalidValue, "high-water mark %d may only be reset to 0, not %d", int(a), v)
	}
	if a == gpu.PoolReservedMemHigh {
		m.reservedHigh = m.reserved
	} else {
		m.usedHigh = m.used
	}
	return nil
}
