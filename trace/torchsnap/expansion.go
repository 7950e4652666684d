// The expansion budget: what a snapshot may cost beyond its decoding.
//
// Decoding a pickle costs memory in proportion to its bytes: a memo
// reference (BINGET, two bytes) pushes the object it names again, not a
// copy. Walking the decoded tree is another matter: a list of a million
// references to one list of a thousand entries is a few megabytes of
// pickle and a billion entries to visit, each of which would become an
// entry and an event here (about 170 bytes with the address set). So the
// build spends one unit of a budget per trace entry and per segment block
// it visits, counting an object as often as it is reached, and stops with
// trace.ErrExpansion when the budget is spent, before the memory is taken.
// The budget is trace.Options.MaxExpansion units per KiB of pickle (256 by
// default: one per 4 bytes), and never less than trace.MinExpansionBudget.
// What the build keeps is then at most about 40 bytes per byte of pickle,
// the same order as the decoded tree itself.

package torchsnap

import (
	"fmt"
	"math"

	"github.com/streamalloc/streamalloc/trace"
)

// expansionBudget is the budget of a pickle of size bytes.
func expansionBudget(size int64, maxExpansion int) int64 {
	if maxExpansion <= 0 {
		maxExpansion = trace.DefaultMaxExpansion
	}
	kib := (size + 1023) / 1024
	if kib > math.MaxInt64/int64(maxExpansion) {
		return math.MaxInt64
	}
	return max(kib*int64(maxExpansion), trace.MinExpansionBudget)
}

// spend takes one unit of the budget, or says that the snapshot expands
// beyond it.
func (sr *Reader) spend() error {
	if sr.budget <= 0 {
		return &trace.ParseError{File: sr.name,
			Msg: fmt.Sprintf("more than %d trace entries and segment blocks in %d bytes of pickle, counting each reference to a repeated one: "+
				"raise the bound on its expansion (--max-expansion, trace.Options.MaxExpansion: %d per KiB) to read it", sr.initial, sr.size, sr.perKiB),
			Err: trace.ErrExpansion}
	}
	sr.budget--
	return nil
}
