// One arena per stream.
//
// Kernels of several streams that bump one counter contend for one
// address, and worse, a Reset on one stream is not ordered with the
// kernels of the others, which may allocate while it zeroes the counter
// and get memory that the next epoch hands out again. A Set gives every
// stream its own arena, created on the stream's first For, so a counter is
// only ever used by the kernels of one stream and reset in that stream's
// order.
//
// Invariants: s.arenas holds every arena the set made and has not closed
// successfully; after Close it holds only those whose Close failed, which a
// later Close retries. s.mu guards both fields; For holds it while it
// creates an arena (which only enqueues work), so two goroutines asking for
// the same stream get the same arena.

package devarena

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

// Set is one arena per stream, all of the same configuration and from the
// same resource. It is safe for concurrent use.
type Set struct {
	res mr.Resource
	cfg Config

	mu     sync.Mutex
	closed bool
	arenas map[uint64]*Arena // by Stream.ID
}

// NewSet returns an empty set whose arenas will have a region of
// cfg.Size bytes each, allocated from res. It allocates nothing yet.
func NewSet(res mr.Resource, cfg Config) (*Set, error) {
	if _, err := cfg.check("devarena: new set"); err != nil {
		return nil, err
	}
	if res == nil {
		return nil, fmt.Errorf("devarena: new set: nil resource: %w", gpu.ErrInvalidHandle)
	}
	return &Set{res: res, cfg: cfg, arenas: make(map[uint64]*Arena)}, nil
}

// For returns the arena of stream s, creating it in stream order on s the
// first time. The arena belongs to the set: close the set, not the arena.
// (An arena closed by hand stays closed; For then returns it and its
// methods return ErrClosed.)
func (set *Set) For(s gpu.Stream) (*Arena, error) {
	if s == nil {
		return nil, fmt.Errorf("devarena: set: nil stream: %w", gpu.ErrInvalidHandle)
	}
	set.mu.Lock()
	defer set.mu.Unlock()
	if set.closed {
		return nil, fmt.Errorf("devarena: set: stream %d: %w", s.ID(), ErrClosed)
	}
	if a, ok := set.arenas[s.ID()]; ok {
		return a, nil
	}
	a, err := New(set.res, s, set.cfg)
	if err != nil {
		return nil, fmt.Errorf("devarena: set: %w", err)
	}
	set.arenas[s.ID()] = a
	return a, nil
}

// Len is the number of arenas the set holds.
func (set *Set) Len() int {
	set.mu.Lock()
	defer set.mu.Unlock()
	return len(set.arenas)
}

// Close closes every arena of the set, each in stream order on its own
// stream, so it must be called before those streams are destroyed. After
// it, For returns ErrClosed. Arenas whose Close fails stay in the set and
// a second Close tries them again; a Close with nothing left to close
// returns ErrClosed.
func (set *Set) Close() error {
	set.mu.Lock()
	defer set.mu.Unlock()
	if set.closed && len(set.arenas) == 0 {
		return fmt.Errorf("devarena: set: close: %w", ErrClosed)
	}
	set.closed = true
	// Stream order, so that errors come back in a stable order.
	ids := make([]uint64, 0, len(set.arenas))
	for id := range set.arenas {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var errs []error
	for _, id := range ids {
		a := set.arenas[id]
		err := a.Close()
		if errors.Is(err, ErrClosed) {
			err = nil // closed by hand before
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("devarena: set: stream %d: %w", id, err))
		}
		if a.Closed() {
			delete(set.arenas, id)
		}
	}
	return errors.Join(errs...)
}
