// Field parsers for the CSV reader.
//
// They work on byte slices that point into the reader's line buffer and
// never convert them to strings, so that parsing a line allocates nothing
// (strconv only takes strings). Each returns ok=false on any input it does
// not accept, including overflow; the caller turns that into a ParseError
// with the column's sentinel. None of them can panic: every index is
// checked against the slice length.

package trace

import (
	"errors"
	"math"
	"strconv"
	"time"
)

// parseUint parses a decimal or 0x-prefixed hexadecimal unsigned integer.
func parseUint(b []byte) (uint64, bool) {
	if len(b) > 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		return parseHex(b[2:])
	}
	return parseDec(b)
}

func parseDec(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

func parseHex(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(d)
	}
	return v, true
}

// sizeResult classifies a size column.
type sizeResult uint8

const (
	sizeOK sizeResult = iota
	sizeNaN
	sizeNegative
)

// parseSize parses a decimal byte count. A leading '-' followed by digits
// is reported as negative (a distinct error from "not a number"); '+' is
// accepted.
func parseSize(b []byte) (int64, sizeResult) {
	if len(b) > 0 && b[0] == '+' {
		b = b[1:]
	}
	if len(b) > 0 && b[0] == '-' {
		if _, ok := parseDec(b[1:]); ok {
			if allZero(b[1:]) {
				return 0, sizeOK // "-0" is zero
			}
			return 0, sizeNegative
		}
		return 0, sizeNaN
	}
	v, ok := parseDec(b)
	if !ok || v > math.MaxInt64 {
		return 0, sizeNaN
	}
	return int64(v), sizeOK
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != '0' {
			return false
		}
	}
	return true
}

// maxTime bounds parsed times so that they fit a time.Duration: about
// 2,562,047 hours, or 292 years.
const maxTime = time.Duration(math.MaxInt64)

// timeResult classifies a time column.
type timeResult uint8

const (
	timeOK    timeResult = iota
	timeBad              // neither form
	timeRange            // well formed, but beyond maxTime
)

// parseTime accepts RMM's time of day, H:MM:SS with an optional fraction
// of up to nine digits (RMM writes HH:MM:SS.ffffff), and a plain number of
// seconds with an optional fraction and exponent ("1634567890.123456",
// "1.5e-3"). Hours may exceed 23 (a log that runs past midnight keeps
// counting in some tools). A time that does not fit a time.Duration is
// timeRange, never wrapped or clamped: no arithmetic here overflows.
func parseTime(b []byte) (time.Duration, timeResult) {
	if len(b) == 0 {
		return 0, timeBad
	}
	colons := 0
	for _, c := range b {
		if c == ':' {
			colons++
		}
	}
	switch colons {
	case 0:
		return parseSeconds(b)
	case 2:
		return parseClock(b)
	}
	return 0, timeBad
}

// parseClock parses H:MM:SS[.fffffffff], H of up to 7 digits.
func parseClock(b []byte) (time.Duration, timeResult) {
	i := indexByte(b, ':')
	h, ok := parseDec(b[:i])
	if !ok || i > 7 {
		return 0, timeBad
	}
	b = b[i+1:]
	i = indexByte(b, ':')
	if i != 2 {
		return 0, timeBad
	}
	m, ok := parseDec(b[:2])
	if !ok || m > 59 {
		return 0, timeBad
	}
	b = b[3:]
	secs, frac := b, []byte(nil)
	if j := indexByte(b, '.'); j >= 0 {
		secs, frac = b[:j], b[j+1:]
		if len(frac) == 0 {
			return 0, timeBad
		}
	}
	if len(secs) != 2 {
		return 0, timeBad
	}
	s, ok := parseDec(secs)
	if !ok || s > 60 { // 60: a leap second
		return 0, timeBad
	}
	ns, ok := parseFraction(frac)
	if !ok {
		return 0, timeBad
	}
	// Seven digits of hours reach 9,999,999 h, beyond maxTime: compare
	// before multiplying. The rest is under 3601 s, so it only needs room.
	if h > uint64(maxTime/time.Hour) {
		return 0, timeRange
	}
	d := time.Duration(h) * time.Hour
	rest := time.Duration(m)*time.Minute + time.Duration(s)*time.Second + time.Duration(ns)
	if d > maxTime-rest {
		return 0, timeRange
	}
	return d + rest, timeOK
}

// parseFraction turns up to nine digits after a decimal point into
// nanoseconds.
func parseFraction(b []byte) (int64, bool) {
	if len(b) > 9 {
		return 0, false
	}
	var ns int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		ns = ns*10 + int64(c-'0')
	}
	for k := len(b); k < 9; k++ {
		ns *= 10
	}
	return ns, true
}

// parseSeconds parses a non-negative number of seconds. The common form,
// digits with an optional fraction of up to nine digits, is parsed exactly
// and without allocating; anything else (an exponent, a longer fraction)
// goes through strconv.ParseFloat.
func parseSeconds(b []byte) (time.Duration, timeResult) {
	whole, frac := b, []byte(nil)
	if j := indexByte(b, '.'); j >= 0 {
		whole, frac = b[:j], b[j+1:]
	}
	if len(whole) > 0 {
		if w, ok := parseDec(whole); ok {
			if ns, ok := parseFraction(frac); ok {
				if w > uint64(maxTime/time.Second) {
					return 0, timeRange
				}
				d := time.Duration(w) * time.Second
				if d > maxTime-time.Duration(ns) {
					return 0, timeRange
				}
				return d + time.Duration(ns), timeOK
			}
		}
	}
	// Rare forms: let strconv decide, then check the range.
	f, err := strconv.ParseFloat(string(b), 64)
	switch {
	case errors.Is(err, strconv.ErrRange) && f > 0, err == nil && f*1e9 >= float64(maxTime):
		return 0, timeRange
	case err != nil || f != f || f < 0:
		return 0, timeBad
	}
	return time.Duration(math.Round(f * 1e9)), timeOK
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}
