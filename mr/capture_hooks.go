// Capture hooks: how code above mr that keeps state of its own about a
// capture takes part in the capture's end, in every launch of its graph
// and in its release. Package buf's block-use tracking is one (a launch
// must wait on the last uses of the buffers its graph touches, and the
// uses after it must wait on the launch); the sanitizer's model of graph
// memory is another.
//
// Code finds the capture a stream is part of with CaptureOf and adds a
// hook while the capture runs. The launches that hooks see are those of
// executables made by Instantiate of the graph that Capture.End returned:
// a launch through that executable calls every hook's BeforeLaunch in the
// order they were added, launches the graph, then calls their after
// functions in the reverse order. A hook that fails BeforeLaunch stops the
// launch: the graph is not launched and the hooks before it are told so.
//
// mr never calls a hook with a lock of its own held, so a hook may hold
// locks of its own while it calls AddHook or CaptureOf, and take them again
// when mr calls it.

package mr

import (
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
)

// CaptureHook is told of a capture's end, of every launch of its graph and
// of its release. Its methods may be called from any goroutine; launches
// of one executable from several goroutines call BeforeLaunch
// concurrently.
type CaptureHook interface {
	// CaptureEnded is called once, when End ends the capture; graph
	// reports whether it ended with a graph (false: it was invalidated or
	// not joined, and nothing of it will be launched).
	CaptureEnded(graph bool)
	// BeforeLaunch is called before each launch on s (not capturing) of
	// an executable made from the capture's graph. It may enqueue work on
	// s that the launch must follow (event waits). It returns the
	// function to call once the launch was enqueued or refused (launched
	// says which), or an error, and then the graph is not launched.
	BeforeLaunch(s gpu.Stream) (after func(launched bool), err error)
	// Released is called by Release, on Release's stream s (ordered after
	// every launch, as Release requires), before the frees the capture
	// deferred are made and before its GraphPool gives its memory back.
	// Release returns its error and goes on.
	Released(s gpu.Stream) error
}

// CaptureOf returns the capture begun with BeginCapture that s is part of
// (begun on s, or joined by s through an event wait), or nil if s is not
// capturing or its capture was begun otherwise. Like gpu.CaptureID it asks
// no driver.
func CaptureOf(s gpu.Stream) *Capture {
	if id := gpu.CaptureID(s); id != 0 {
		return lookupCapture(id)
	}
	return nil
}

// AddHook adds h to the capture. It must be added while the capture runs:
// once End was called it fails with ErrCaptureEnded, after Release with
// ErrReleased.
func (c *Capture) AddHook(h CaptureHook) error {
	if h == nil {
		return fmt.Errorf("mr: capture %d: add hook: nil hook: %w", c.id, gpu.ErrInvalidValue)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.released.Load():
		return fmt.Errorf("mr: capture %d: add hook: %w", c.id, ErrReleased)
	case c.ended:
		return fmt.Errorf("mr: capture %d: add hook: %w", c.id, ErrCaptureEnded)
	}
	c.hooks = append(c.hooks, h)
	return nil
}

// launchHooks returns the hooks a launch calls; after End the list no
// longer changes.
func (c *Capture) launchHooks() []CaptureHook {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hooks
}

// Launch launches the executable on s between the capture's hooks.
func (x *captureExec) Launch(s gpu.Stream) error {
	hooks := x.g.c.launchHooks()
	if len(hooks) == 0 {
		return x.GraphExec.Launch(s)
	}
	afters := make([]func(bool), 0, len(hooks))
	done := func(launched bool) {
		for i := len(afters) - 1; i >= 0; i-- {
			afters[i](launched)
		}
	}
	for _, h := range hooks {
		after, err := h.BeforeLaunch(s)
		if err != nil {
			done(false)
			return fmt.Errorf("mr: launch graph of capture %d: %w", x.g.c.id, err)
		}
		if after != nil {
			afters = append(afters, after)
		}
	}
	err := x.GraphExec.Launch(s)
	done(err == nil)
	return err
}
