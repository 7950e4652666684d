// Check: a memory budget for continuous integration.
//
// A program's memory needs change with its code; a replay of a recorded
// trace on the simulator tells, without a GPU, what a resource will
// reserve for it. Check runs that replay and turns a figure above the
// budget into an error that states the figures, so that a test of the
// program's own repository fails when a change makes it need more:
//
//	if _, err := replay.Check(ctx, tr, dev, res, replay.Budget{PeakReserved: 6 << 30}, replay.Options{}); err != nil {
//		t.Fatal(err)
//	}
//
// The figures are the simulator's decisions, the same on every run and
// every machine (replay's package comment says what a replay keeps), so
// a bound can be tight without making the test flaky.

package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
	"github.com/streamalloc/streamalloc/trace"
)

// ErrOverBudget is the error, wrapped in an *OverBudgetError, of a replay
// whose figures exceed its Budget.
var ErrOverBudget = errors.New("replay: over budget")

// ErrBudget is the error of a Budget that bounds nothing or bounds it
// below zero.
var ErrBudget = errors.New("replay: bad budget")

// A Budget bounds what a replay may measure. Zero fields bound nothing;
// at least one must be set.
type Budget struct {
	// PeakReserved bounds Result.PeakReservedBytes.
	PeakReserved uint64
	// Fragmentation bounds Result.Fragmentation (peak reserved over peak
	// live), if above 0; it must be at least 1 to be met at all.
	Fragmentation float64
	// Failures bounds Result.Failures (allocations the resource refused)
	// when FailuresSet is true: a budget of 0 failures is a bound too.
	Failures    int64
	FailuresSet bool
}

// OverBudgetError says which figures of a replay exceeded its budget. It
// matches ErrOverBudget.
type OverBudgetError struct {
	Result *Result
	Budget Budget
	// Over names each figure above its bound, with both numbers:
	// "peak reserved 1.2 GiB (1288490188 bytes) > 1.0 GiB (1073741824 bytes)".
	Over []string
}

func (e *OverBudgetError) Error() string {
	msg := fmt.Sprintf("replay: %s on %s: over budget:", e.Result.Trace, e.Result.Resource)
	for i, o := range e.Over {
		if i > 0 {
			msg += ";"
		}
		msg += " " + o
	}
	return msg + fmt.Sprintf(" (peak live %s)", sizeString(e.Result.PeakLiveBytes))
}

// Unwrap returns ErrOverBudget.
func (e *OverBudgetError) Unwrap() error { return ErrOverBudget }

// Check replays tr against res on dev (as Run does, with opts) and
// compares the result with b. It returns the result in every case Run
// returns one; the error is Run's, or an *OverBudgetError naming every
// figure above its bound. A Budget that bounds nothing, or a negative
// or NaN bound, is an error matching ErrBudget, before anything is
// replayed.
func Check(ctx context.Context, tr trace.Reader, dev gpu.Device, res mr.Resource, b Budget, opts Options) (*Result, error) {
	if b.PeakReserved == 0 && !(b.Fragmentation > 0) && !b.FailuresSet {
		return nil, fmt.Errorf("%w: %+v bounds nothing", ErrBudget, b)
	}
	if b.Fragmentation < 0 || b.Fragmentation != b.Fragmentation || b.Failures < 0 {
		return nil, fmt.Errorf("%w: %+v", ErrBudget, b)
	}
	r, err := Run(ctx, tr, dev, res, opts)
	if err != nil {
		return nil, err
	}
	var over []string
	if b.PeakReserved > 0 && r.PeakReservedBytes > b.PeakReserved {
		over = append(over, fmt.Sprintf("peak reserved %s > %s", sizeString(r.PeakReservedBytes), sizeString(b.PeakReserved)))
	}
	if b.Fragmentation > 0 && r.Fragmentation > b.Fragmentation {
		over = append(over, fmt.Sprintf("fragmentation %.4f > %.4f", r.Fragmentation, b.Fragmentation))
	}
	if b.FailuresSet && r.Failures > b.Failures {
		over = append(over, fmt.Sprintf("%d allocations refused > %d", r.Failures, b.Failures))
	}
	if over != nil {
		return r, &OverBudgetError{Result: r, Budget: b, Over: over}
	}
	return r, nil
}

// sizeString formats n in IEC units with the exact count.
func sizeString(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if u == 0 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%.1f %s (%d bytes)", v, units[u], n)
}
