// Vector clocks for streams, events and the host.
//
// Each stream the sanitizer sees gets a small index. A clock maps indices
// to counters: clock[i] = k means "everything stream i had enqueued up to
// its k-th observed operation is ordered before this point". Each observed
// operation on a stream ticks the stream's own component and is named by
// an epoch (index, counter); an earlier operation is ordered before a
// point exactly when the point's clock has reached its epoch (the
// FastTrack representation: one epoch per operation, full clocks only for
// streams, events and the host).

package sanitize

type clock []uint64

// get is c[i], 0 past the end.
func (c clock) get(i int) uint64 {
	if i < len(c) {
		return c[i]
	}
	return 0
}

// join raises c to at least o, componentwise.
func (c *clock) join(o clock) {
	if len(o) > len(*c) {
		*c = append(*c, make(clock, len(o)-len(*c))...)
	}
	cc := *c
	for i, v := range o {
		if v > cc[i] {
			cc[i] = v
		}
	}
}

// tick advances component i and returns its new value.
func (c *clock) tick(i int) uint64 {
	if i >= len(*c) {
		*c = append(*c, make(clock, i+1-len(*c))...)
	}
	(*c)[i]++
	return (*c)[i]
}

func (c clock) clone() clock { return append(clock(nil), c...) }

// epoch names one observed operation: the t-th on stream index idx.
type epoch struct {
	idx int
	t   uint64
}

// before reports whether the operation e is ordered before a point whose
// clock is c. The zero epoch (no operation) is before everything.
func (e epoch) before(c clock) bool { return e.t == 0 || c.get(e.idx) >= e.t }
