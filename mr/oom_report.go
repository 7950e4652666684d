// The out-of-memory observer's report: what a Retry adaptor hands to
// RetryOptions.OnFailure when a request is refused for good, so that a
// program can log, export or act on the state of memory at the moment it
// ran out (PyTorch's out-of-memory observer; RMM's failure callback).

package mr

import (
	"fmt"
	"strings"

	"github.com/streamalloc/streamalloc/gpu"
)

// OutOfMemoryReport describes a request refused for lack of memory after
// every retry.
type OutOfMemoryReport struct {
	Size    int    // bytes requested
	Stream  uint64 // the requesting stream's ID
	Retries int    // retries made for it
	// Err is the error Allocate returns; it matches ErrOutOfMemory, and
	// errors.As finds the *OutOfMemoryError of the resource that refused.
	Err error
	// Stats are the statistics of the chain below the Retry adaptor, read
	// after the last attempt.
	Stats ChainStats
}

// Summary is the summary of Stats (WriteSummary's text).
func (r OutOfMemoryReport) Summary() string {
	var b strings.Builder
	r.Stats.WriteSummary(&b)
	return b.String()
}

// String is one line: "out of memory: 1.5 GiB requested on stream 3, 3
// retries: <the error>".
func (r OutOfMemoryReport) String() string {
	return fmt.Sprintf("out of memory: %s requested on stream %d, %s: %v",
		FormatBytes(uint64(max(r.Size, 0))), r.Stream, plural(uint64(r.Retries), "retry", "retries"), r.Err)
}

// observe calls the OnFailure observer, if any, for a request refused for
// good.
func (r *Retry) observe(size int, s gpu.Stream, retries int, err error) {
	if r.opts.OnFailure == nil {
		return
	}
	r.opts.OnFailure(OutOfMemoryReport{Size: size, Stream: s.ID(), Retries: retries, Err: err, Stats: StatsOf(r.up)})
}
