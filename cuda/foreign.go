// Contexts of foreign handles: which context a stream or a context handed
// to us by other code belongs to, so that the layer above can refuse what
// is not a device's primary context instead of passing it to the driver
// (where a stream of another context is an error at best).

package cuda

// StreamPerThread is CU_STREAM_PER_THREAD, the handle of the calling
// thread's per-thread default stream.
const StreamPerThread Stream = 0x2

// StreamLegacy is CU_STREAM_LEGACY, the legacy default stream named
// explicitly; 0 names it too.
const StreamLegacy Stream = 0x1

// StreamContext returns the context s belongs to (cuStreamGetCtx), with c
// current for the call, so that the null stream (0) and StreamPerThread
// name c's own.
func (c Context) StreamContext(s Stream) (Context, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, v := rawStreamGetCtx(c, s)
	if r != Success {
		return 0, &Error{Op: "cuStreamGetCtx", Code: r}
	}
	return Context(v), nil
}

// Device returns the device of c (cuCtxGetDevice, with c made current for
// the question and the calling thread's current context put back after).
func (c Context) Device() (Device, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	r, v := rawCtxGetDevice(c)
	if r != Success {
		return 0, &Error{Op: "cuCtxGetDevice", Code: r}
	}
	return Device(int32(v)), nil
}
