// Fault injection: making driver calls fail, for tests of the paths that
// handle failures.
//
// Every driver call of the gpu interface passes through inject (or
// injectNamed) after its handles are checked and before it changes
// anything, so a failed call leaves no trace. Two ways to fail one:
//
//   - FailNext(op, n, err) fails the next n calls of op, whoever makes
//     them; enough for a path that makes one call of a kind.
//   - SetInjector(f) asks f about every call, with what it needs to pick
//     one on any path: the call's number among the calls of its kind
//     (Call.N) and among all calls (Call.Seq) since f was set, and the
//     caller's stack (Call.From, Call.Stack). FailNth, FailFrom and
//     FailCall build the usual ones: the k-th call of a kind, the calls
//     from a given function, the k-th call of any kind, which a test runs
//     for every k up to the number of calls its scenario makes to fail
//     every call of every path in turn.
//
// FailNext's pending failures are consulted first; the injector is asked
// about every call either way (its counts count every call). The injector
// runs outside the device's locks, on the calling goroutine.

package sim

import (
	"runtime"
	"strings"

	"github.com/streamalloc/streamalloc/gpu"
)

type injection struct {
	n   int
	err error
}

// A Call is a driver call about to be made, as an Injector sees it.
type Call struct {
	// Op is the driver function.
	Op Op
	// N is the call's number among the calls of Op on the device since
	// the injector was set, from 1.
	N int
	// Seq is the call's number among all driver calls on the device since
	// the injector was set, from 1.
	Seq int

	pcs []uintptr
}

// Stack returns the functions on the caller's stack, innermost first,
// without this package's own (package path and name, as
// "github.com/streamalloc/streamalloc/mr.(*Pool).grow").
func (c Call) Stack() []string {
	var out []string
	frames := runtime.CallersFrames(c.pcs)
	for {
		f, more := frames.Next()
		if f.Function != "" && !strings.HasPrefix(f.Function, "github.com/streamalloc/streamalloc/gpu/sim.") {
			out = append(out, f.Function)
		}
		if !more {
			return out
		}
	}
}

// From reports whether a function whose name contains site (such as
// "mr.(*Pool).releaseIdle") is on the caller's stack.
func (c Call) From(site string) bool {
	for _, f := range c.Stack() {
		if strings.Contains(f, site) {
			return true
		}
	}
	return false
}

// An Injector decides, before each driver call of a device, whether it
// fails: a non-nil error fails it, as FailNext's err does (a gpu.Code
// becomes a *gpu.Error naming the call).
type Injector func(Call) error

// SetInjector makes f decide every later driver call of the device, and
// starts its counts; nil removes it.
func (d *Device) SetInjector(f Injector) {
	d.injMu.Lock()
	defer d.injMu.Unlock()
	d.injector = f
	d.injCalls = [opCount]int{}
	d.injSeq = 0
}

// FailNth fails the n-th call of op (counted from the SetInjector) with
// err.
func FailNth(op Op, n int, err error) Injector {
	return func(c Call) error {
		if c.Op == op && c.N == n {
			return err
		}
		return nil
	}
}

// FailCall fails the k-th driver call of any kind (counted from the
// SetInjector) with err.
func FailCall(k int, err error) Injector {
	return func(c Call) error {
		if c.Seq == k {
			return err
		}
		return nil
	}
}

// FailFrom fails the calls of op made from a function whose name contains
// site (Call.From) with err: the first n of them, or all if n <= 0.
func FailFrom(op Op, site string, n int, err error) Injector {
	failed := 0
	return func(c Call) error {
		if c.Op != op || (n > 0 && failed >= n) || !c.From(site) {
			return nil
		}
		failed++
		return err
	}
}

// FailNext makes the next n calls of op on this device fail with err (a
// gpu.Code such as gpu.ErrLaunchFailed becomes a *gpu.Error naming the
// call; other errors are wrapped). A failing call changes nothing. n <= 0
// cancels pending failures of op; a nil err means gpu.ErrUnknown.
func (d *Device) FailNext(op Op, n int, err error) {
	d.injMu.Lock()
	defer d.injMu.Unlock()
	if n <= 0 {
		delete(d.inj, op)
		return
	}
	if err == nil {
		err = gpu.ErrUnknown
	}
	d.inj[op] = &injection{n: n, err: err}
}

// inject is injectNamed with the call's own name.
func (d *Device) inject(op Op) error { return d.injectNamed(op, op.String()) }

// injectNamed reports whether the call of op about to be made fails: a
// pending FailNext failure, else the injector's answer. name is the call
// in the error (a more precise one than op's, for OpCopy).
func (d *Device) injectNamed(op Op, name string) error {
	d.injMu.Lock()
	var err error
	if in := d.inj[op]; in != nil {
		in.n--
		if in.n <= 0 {
			delete(d.inj, op)
		}
		err = in.err
	}
	f := d.injector
	var c Call
	if f != nil {
		d.injSeq++
		if op > 0 && op < opCount {
			d.injCalls[op]++
			c.N = d.injCalls[op]
		}
		c.Op, c.Seq = op, d.injSeq
	}
	d.injMu.Unlock()
	if f != nil {
		var pcs [64]uintptr
		c.pcs = pcs[:runtime.Callers(2, pcs[:])]
		if ferr := f(c); err == nil {
			err = ferr
		}
	}
	if err == nil {
		return nil
	}
	return injected(name, err)
}
