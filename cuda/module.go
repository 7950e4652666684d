// Modules, functions and kernel launches.
//
// A module is loaded from PTX text (or a cubin) with cuModuleLoadData; the
// driver compiles PTX for the device at load time. A launch passes its
// arguments in Params, a fixed-size block packed on the Go side as the
// driver lays kernel parameters out (each at an offset aligned to its own
// size); the C wrapper copies the block to its stack and builds the
// pointer array there, so no Go memory is retained or referenced by the
// driver after the call.

package cuda

import (
	"math"
	"strings"
)

// Module is a CUmodule.
type Module uintptr

// Function is a CUfunction.
type Function uintptr

// Limits of one launch's parameter block (SA_MAX_PARAMS and
// SA_MAX_PARAM_BYTES in shim.h).
const (
	MaxParams     = 32
	MaxParamBytes = 512
)

// ModuleLoadData loads a module from PTX text or a cubin image. PTX that
// does not compile gives an *Error matching ErrInvalidPTX (or
// ErrInvalidImage).
func (c Context) ModuleLoadData(image string) (Module, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	if image == "" || strings.IndexByte(image, 0) >= 0 {
		// PTX is NUL-terminated text for the driver: an embedded NUL
		// would silently cut it short.
		return 0, &Error{Op: "cuModuleLoadData", Code: ErrInvalidValue}
	}
	r, m := rawModuleLoadData(c, image)
	if r != Success {
		return 0, &Error{Op: "cuModuleLoadData", Code: r}
	}
	return Module(m), nil
}

// ModuleUnload unloads m; its functions become invalid.
func (c Context) ModuleUnload(m Module) error {
	if err := c.ok(); err != nil {
		return err
	}
	if m == 0 {
		return &Error{Op: "cuModuleUnload", Code: ErrInvalidHandle}
	}
	return check("cuModuleUnload", rawModuleUnload(c, m))
}

// ModuleGetFunction looks up the kernel named name in m; an unknown name
// gives an *Error matching ErrNotFound.
func (c Context) ModuleGetFunction(m Module, name string) (Function, error) {
	if err := c.ok(); err != nil {
		return 0, err
	}
	if m == 0 {
		return 0, &Error{Op: "cuModuleGetFunction", Code: ErrInvalidHandle}
	}
	if name == "" || strings.IndexByte(name, 0) >= 0 {
		return 0, &Error{Op: "cuModuleGetFunction", Code: ErrNotFound}
	}
	r, f := rawModuleGetFunction(c, m, name)
	if r != Success {
		return 0, &Error{Op: "cuModuleGetFunction", Code: r}
	}
	return Function(f), nil
}

// FuncParamSizes returns the size in bytes of each of f's parameters, in
// order (cuFuncGetParamInfo, CUDA 12.4 and later). A driver without that
// entry point gives an *Error matching ErrNotSupported. The driver reads
// as many arguments as the kernel declares, whatever a launch passes, so
// callers use this to refuse a launch whose arguments do not match.
func (c Context) FuncParamSizes(f Function) ([]int, error) {
	if err := c.ok(); err != nil {
		return nil, err
	}
	if f == 0 {
		return nil, &Error{Op: "cuFuncGetParamInfo", Code: ErrInvalidHandle}
	}
	var sizes []int
	for i := uint64(0); ; i++ {
		r, _, size := rawFuncParamInfo(c, f, i)
		if r == ErrInvalidValue {
			// Past the last parameter (at once for a kernel without any).
			return sizes, nil
		}
		if r != Success {
			return nil, &Error{Op: "cuFuncGetParamInfo", Code: r}
		}
		if i >= MaxParams {
			return nil, &Error{Op: "cuFuncGetParamInfo", Code: ErrNotSupported}
		}
		sizes = append(sizes, int(size))
	}
}

// Params is a kernel's argument list. Append the arguments in the order of
// the kernel's parameters; the zero Params is empty and ready to use.
// Appending past MaxParams arguments or MaxParamBytes bytes marks the list
// as overflowed, and LaunchKernel then refuses it with ErrInvalidValue.
type Params struct {
	vals     [MaxParamBytes]byte
	offs     [MaxParams]uint32
	size     int
	n        int
	overflow bool
}

// Len is the number of arguments appended.
func (p *Params) Len() int { return p.n }

// put appends the little-endian bytes of v, width bytes wide, at the next
// offset aligned to width.
func (p *Params) put(v uint64, width int) {
	off := (p.size + width - 1) &^ (width - 1)
	if p.n >= MaxParams || off+width > MaxParamBytes {
		p.overflow = true
		return
	}
	for i := 0; i < width; i++ {
		p.vals[off+i] = byte(v >> (8 * i))
	}
	p.offs[p.n] = uint32(off)
	p.n++
	p.size = off + width
}

// Ptr appends a device pointer (a .u64 parameter).
func (p *Params) Ptr(v DevicePtr) { p.put(uint64(v), 8) }

// U32 appends a .u32 parameter.
func (p *Params) U32(v uint32) { p.put(uint64(v), 4) }

// I32 appends a .s32 parameter.
func (p *Params) I32(v int32) { p.put(uint64(uint32(v)), 4) }

// U64 appends a .u64 parameter.
func (p *Params) U64(v uint64) { p.put(v, 8) }

// I64 appends a .s64 parameter.
func (p *Params) I64(v int64) { p.put(uint64(v), 8) }

// F32 appends a .f32 parameter.
func (p *Params) F32(v float32) { p.put(uint64(math.Float32bits(v)), 4) }

// F64 appends a .f64 parameter.
func (p *Params) F64(v float64) { p.put(math.Float64bits(v), 8) }

// LaunchKernel enqueues f on s with the given grid and block shapes (each
// component at least 1), dynamic shared memory in bytes, and arguments.
// The driver takes as many arguments as f declares, of the sizes it
// declares; LaunchKernel does not check them (gpu/cudagpu does, with
// FuncParamSizes). Missing ones read as zeros.
func (c Context) LaunchKernel(f Function, grid, block [3]uint32, sharedMem uint32, s Stream, args *Params) error {
	if err := c.ok(); err != nil {
		return err
	}
	if f == 0 {
		return &Error{Op: "cuLaunchKernel", Code: ErrInvalidHandle}
	}
	if args == nil {
		args = &Params{}
	}
	if args.overflow {
		return &Error{Op: "cuLaunchKernel", Code: ErrInvalidValue}
	}
	for i := range 3 {
		if grid[i] == 0 || block[i] == 0 {
			return &Error{Op: "cuLaunchKernel", Code: ErrInvalidValue}
		}
	}
	return check("cuLaunchKernel", rawLaunchKernel(c, f, grid, block, sharedMem, s, args))
}
