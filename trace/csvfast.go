// The CSV reader's fast path: one pass over a line as RMM writes it.
//
// Almost every line of a real log has one shape: a decimal thread id, a
// time of day HH:MM:SS with a fraction, an action, the pointer and the
// stream in 0x-hex and a decimal size. parseFast reads such a line in a
// single pass, column by column, with no split into sub-slices and no
// second scan of the time for its colons, and accepts only what it can
// prove parse (fields.go) accepts with the same result: every number
// short enough that it cannot overflow, every form of the time the
// general parser reads exactly. Anything else, a legal rarer form (a
// numeric time, a '+' sign, a 20-digit thread id) as well as every error,
// makes it give up, and the caller parses the line again with parse, which
// alone decides what is accepted and what each error says. So the fast
// path changes no result and no error, only the time: FuzzParseFast holds
// the two to the same events.

package trace

import "time"

// Digit limits below which a column's value cannot overflow what parse
// computes for it.
const (
	fastMaxDec      = 19 // decimal digits of a uint64 (10^19-1 < 2^64)
	fastMaxSizeDec  = 18 // of an int64 size (10^18-1 < 2^63)
	fastMaxHex      = 16
	fastMaxHours    = 6 // 999,999 h and 3,601 s fit a Duration
	fastMaxWholeSec = 9 // a numeric time of up to 999,999,999 s
	fastMaxFrac     = 9
)

// hexVal maps a byte to its value as a hexadecimal digit, or 0xff.
var hexVal = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c - 'a' + 10)
		t[c-'a'+'A'] = byte(c - 'a' + 10)
	}
	return t
}()

// fastLine walks one line.
type fastLine struct {
	b []byte
	i int
}

// digits reads the decimal digits at l.i and returns their value (which
// wraps past 19 digits: the callers refuse so many) and how many there were.
func (l *fastLine) digits() (uint64, int) {
	start := l.i
	var v uint64
	for l.i < len(l.b) {
		c := l.b[l.i] - '0'
		if c > 9 {
			break
		}
		v = v*10 + uint64(c)
		l.i++
	}
	return v, l.i - start
}

// dec reads 1 to max decimal digits ending at a comma or the end of the
// line (which it does not consume) and returns their value.
func (l *fastLine) dec(max int) (uint64, bool) {
	v, n := l.digits()
	return v, n > 0 && n <= max
}

// uint reads a column as parseUint does: 0x-hex of 1 to 16 digits, or
// decimal of up to 19.
func (l *fastLine) uint() (uint64, bool) {
	b := l.b
	if l.i+2 < len(b) && b[l.i] == '0' && (b[l.i+1] == 'x' || b[l.i+1] == 'X') {
		l.i += 2
		start := l.i
		var v uint64
		for l.i < len(b) {
			d := hexVal[b[l.i]]
			if d == 0xff {
				break
			}
			v = v<<4 | uint64(d)
			l.i++
		}
		n := l.i - start
		return v, n > 0 && n <= fastMaxHex
	}
	return l.dec(fastMaxDec)
}

// comma consumes the comma that ends a column.
func (l *fastLine) comma() bool {
	if l.i < len(l.b) && l.b[l.i] == ',' {
		l.i++
		return true
	}
	return false
}

// frac reads an optional '.' and 1 to 9 digits, as nanoseconds.
func (l *fastLine) frac() (int64, bool) {
	if l.i >= len(l.b) || l.b[l.i] != '.' {
		return 0, true
	}
	l.i++
	v, n := l.digits()
	if n == 0 || n > fastMaxFrac {
		return 0, false
	}
	ns := int64(v)
	for ; n < 9; n++ {
		ns *= 10
	}
	return ns, true
}

// two reads exactly two decimal digits.
func (l *fastLine) two() (int64, bool) {
	if l.i+2 > len(l.b) {
		return 0, false
	}
	a, b := l.b[l.i]-'0', l.b[l.i+1]-'0'
	if a > 9 || b > 9 {
		return 0, false
	}
	l.i += 2
	return int64(a)*10 + int64(b), true
}

// time reads H:MM:SS[.f] with up to 6 digits of hours, or whole
// seconds[.f] with up to 9 digits, each as parseTime reads it.
func (l *fastLine) time() (time.Duration, bool) {
	start := l.i
	lead, ok := l.dec(fastMaxWholeSec)
	if !ok {
		return 0, false
	}
	if l.i < len(l.b) && l.b[l.i] == ':' {
		if l.i-start > fastMaxHours {
			return 0, false
		}
		l.i++
		m, ok := l.two()
		if !ok || m > 59 || l.i >= len(l.b) || l.b[l.i] != ':' {
			return 0, false
		}
		l.i++
		s, ok := l.two()
		if !ok || s > 60 {
			return 0, false
		}
		ns, ok := l.frac()
		if !ok {
			return 0, false
		}
		return time.Duration(lead)*time.Hour + time.Duration(m)*time.Minute +
			time.Duration(s)*time.Second + time.Duration(ns), true
	}
	ns, ok := l.frac()
	if !ok {
		return 0, false
	}
	return time.Duration(lead)*time.Second + time.Duration(ns), true
}

// action reads the action column and its comma.
func (l *fastLine) action() (Op, bool) {
	rest := l.b[l.i:]
	switch {
	case hasPrefix(rest, "allocate,"):
		l.i += len("allocate,")
		return Alloc, true
	case hasPrefix(rest, "free,"):
		l.i += len("free,")
		return Free, true
	case hasPrefix(rest, "deallocate,"):
		l.i += len("deallocate,")
		return Free, true
	case hasPrefix(rest, "allocate failure,"):
		l.i += len("allocate failure,")
		return AllocFailure, true
	}
	return 0, false
}

func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}

// parseFast parses a data line (without its line ending) of the common
// shape, and reports false for any other line, which parse must then
// read. The event's Line is left 0.
func parseFast(b []byte) (Event, bool) {
	l := fastLine{b: b}
	var ev Event
	var ok bool
	if ev.Thread, ok = l.uint(); !ok || !l.comma() {
		return Event{}, false
	}
	if ev.Time, ok = l.time(); !ok || !l.comma() {
		return Event{}, false
	}
	if ev.Op, ok = l.action(); !ok {
		return Event{}, false
	}
	if ev.Ptr, ok = l.uint(); !ok || !l.comma() {
		return Event{}, false
	}
	size, ok := l.dec(fastMaxSizeDec)
	if !ok || !l.comma() {
		return Event{}, false
	}
	ev.Size = int64(size)
	if ev.Stream, ok = l.uint(); !ok || l.i != len(b) {
		return Event{}, false
	}
	return ev, true
}
