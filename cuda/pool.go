// Driver memory pools (CUmemoryPool): the default pool of a device, pools
// of our own, their attributes, and trimming.
//
// A pool made by MemPoolCreate holds pinned device memory on one device
// and exports no handles. Attributes travel as uint64 on the Go side; the
// C wrapper passes the three reuse policies to the driver as int, as the
// driver expects, and the others as cuuint64_t.

package cuda

// MemPool is a CUmemoryPool.
type MemPool uintptr

// PoolAttribute is a CUmemPool_attribute.
type PoolAttribute int32

// Pool attributes (cuda.h's values). The reuse policies are booleans; the
// rest are byte counts. The current values are read-only; the high-water
// marks may only be set to 0, which resets them.
const (
	PoolReuseFollowEventDependencies   PoolAttribute = 1
	PoolReuseAllowOpportunistic        PoolAttribute = 2
	PoolReuseAllowInternalDependencies PoolAttribute = 3
	PoolReleaseThreshold               PoolAttribute = 4
	PoolReservedMemCurrent             PoolAttribute = 5
	PoolReservedMemHigh                PoolAttribute = 6
	PoolUsedMemCurrent                 PoolAttribute = 7
	PoolUsedMemHigh                    PoolAttribute = 8
)

// MemPoolCreate creates a pool of device memory on d.
func (c Context) MemPoolCreate(d Device) (MemPool, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, p := rawMemPoolCreate(c, d, HandleNone)
	if r != Success {
		return 0, &Error{Op: "cuMemPoolCreate", Code: r}
	}
	return MemPool(p), nil
}

// MemPoolDestroy destroys a pool made by MemPoolCreate. Memory still
// allocated from it is freed when its frees complete.
func (c Context) MemPoolDestroy(p MemPool) error {
	if err := c.ok(); err != nil {
		return err
	}
	if p == 0 {
		return &Error{Op: "cuMemPoolDestroy", Code: ErrInvalidHandle}
	}
	return check("cuMemPoolDestroy", rawMemPoolDestroy(c, p))
}

// MemPoolAttribute reads attribute a of p.
func (c Context) MemPoolAttribute(p MemPool, a PoolAttribute) (uint64, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	if p == 0 {
		return 0, &Error{Op: "cuMemPoolGetAttribute", Code: ErrInvalidHandle}
	}
	r, v := rawMemPoolGetAttribute(c, p, a)
	if r != Success {
		return 0, &Error{Op: "cuMemPoolGetAttribute", Code: r}
	}
	return v, nil
}

// MemPoolSetAttribute sets attribute a of p to v. For the reuse policies v
// must be 0 or 1.
func (c Context) MemPoolSetAttribute(p MemPool, a PoolAttribute, v uint64) error {
	if err := c.ok(); err != nil {
		return err
	}
	if p == 0 {
		return &Error{Op: "cuMemPoolSetAttribute", Code: ErrInvalidHandle}
	}
	if a >= PoolReuseFollowEventDependencies && a <= PoolReuseAllowInternalDependencies && v > 1 {
		return &Error{Op: "cuMemPoolSetAttribute", Code: ErrInvalidValue}
	}
	return check("cuMemPoolSetAttribute", rawMemPoolSetAttribute(c, p, a, v))
}

// MemPoolTrimTo releases memory of p that no allocation uses until at
// most keep bytes stay reserved.
func (c Context) MemPoolTrimTo(p MemPool, keep uint64) error {
	if err := c.ok(); err != nil {
		return err
	}
	if p == 0 {
		return &Error{Op: "cuMemPoolTrimTo", Code: ErrInvalidHandle}
	}
	return check("cuMemPoolTrimTo", rawMemPoolTrimTo(c, p, keep))
}
