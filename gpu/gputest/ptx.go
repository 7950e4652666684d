package gputest

import "github.com/streamalloc/streamalloc/gpu/kernels"

// kernelsPTX is the built-in module's text, for tests that load their own
// copy of the module.
func kernelsPTX() string { return kernels.PTX }
