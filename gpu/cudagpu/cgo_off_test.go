//go:build !cgo

package cudagpu_test

// withCgo reports whether this test binary can load a driver at all.
const withCgo = false
