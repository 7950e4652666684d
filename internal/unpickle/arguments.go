// The arguments of opcodes: fixed bytes, counted bytes, and lines of
// text (numbers and memo indexes of the text opcodes).
//
// Every read is checked against the bytes left before anything is
// allocated for it, and takes no more than it names: a counted argument
// is a slice of the input until a string or a number is made of it.
// Text is read as Python's pickler writes it; text Python might still
// read (whitespace, underscores, a base prefix, a NUL where CPython's C
// parser stops) is ErrUnsupported, not ErrInvalid.

package unpickle

import (
	"bytes"
	"encoding/binary"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// take returns the next n bytes of the input.
func (d *decoder) take(n uint64) ([]byte, error) {
	if n > uint64(len(d.data)-d.pos) {
		return nil, d.truncated(n)
	}
	if d.pos < d.frameEnd && n > uint64(d.frameEnd-d.pos) {
		return nil, d.failAt(ErrInvalid, "%d bytes of argument cross the end of the frame at byte %d", n, d.frameAt)
	}
	b := d.data[d.pos : d.pos+int(n)]
	d.pos += int(n)
	return b, nil
}

// counted reads a little-endian length of size bytes (1, 4 or 8; when
// signed, Python refuses a negative one), then that many bytes.
func (d *decoder) counted(signed bool, size int) ([]byte, error) {
	b, err := d.take(uint64(size))
	if err != nil {
		return nil, err
	}
	var n uint64
	switch size {
	case 1:
		n = uint64(b[0])
	case 4:
		n = uint64(binary.LittleEndian.Uint32(b))
		if signed && int32(n) < 0 {
			return nil, d.failAt(ErrInvalid, "a negative length, %d", int32(n))
		}
	case 8:
		n = binary.LittleEndian.Uint64(b)
	}
	return d.take(n)
}

// lengthSize is the size of the length field of op, an opcode of the
// family whose one-byte form is short and four-byte form is long (the
// rest have eight bytes).
func lengthSize(op, short, long byte) int {
	switch op {
	case short:
		return 1
	case long:
		return 4
	}
	return 8
}

// line returns the text up to the next newline (not included), which
// must come within max bytes (and within the frame it starts in), and
// moves past the newline.
func (d *decoder) line(max int) ([]byte, error) {
	rest := d.data[d.pos:]
	inFrame := d.pos < d.frameEnd
	if inFrame {
		rest = d.data[d.pos:d.frameEnd]
	}
	window := rest[:min(len(rest), max+1)]
	i := bytes.IndexByte(window, '\n')
	if i < 0 {
		switch {
		case len(window) < len(rest):
			return nil, d.failAt(ErrInvalid, "a line longer than %d bytes", max)
		case inFrame:
			return nil, d.failAt(ErrInvalid, "a line that crosses the end of the frame at byte %d", d.frameAt)
		}
		d.pos = len(d.data)
		return nil, d.fail(ErrTruncated, "the input ends inside %s's line at byte %d", opName(d.op), d.opAt+1)
	}
	d.pos += i + 1
	return window[:i], nil
}

// memoIndex reads the memo index argument of a PUT or GET opcode (text,
// one byte or four bytes).
func (d *decoder) memoIndex(text, short byte) (uint64, error) {
	switch d.op {
	case text:
		line, err := d.line(24)
		if err != nil {
			return 0, err
		}
		digits, negative := line, false
		if len(digits) > 0 && (digits[0] == '+' || digits[0] == '-') {
			digits, negative = digits[1:], digits[0] == '-'
		}
		idx, err := strconv.ParseUint(string(digits), 10, 64)
		switch {
		case err != nil && isRangeErr(err):
			return 0, d.failAt(ErrUnsupported, "memo index %.40q", line)
		case err != nil:
			return 0, d.failAt(textError(line), "memo index %.40q", line)
		case negative && idx != 0:
			return 0, d.failAt(ErrInvalid, "memo index %.40q", line)
		}
		return idx, nil
	case short:
		b, err := d.take(1)
		if err != nil {
			return 0, err
		}
		return uint64(b[0]), nil
	}
	b, err := d.take(4)
	if err != nil {
		return 0, err
	}
	return uint64(binary.LittleEndian.Uint32(b)), nil
}

// decimal decodes INT or LONG: a decimal integer on a line (INT's "00"
// and "01" are False and True; LONG's may end in L).
func (d *decoder) decimal() error {
	at := d.pos
	// The line may hold a sign, maxDigits digits and LONG's L.
	line, err := d.line(d.maxDigits + 2)
	if err != nil {
		if digitsFrom(d.data[at:min(len(d.data), at+d.maxDigits+2)]) > d.maxDigits {
			return d.tooManyDigits(at)
		}
		return err
	}
	if d.op == opInt && len(line) == 2 && line[0] == '0' && (line[1] == '0' || line[1] == '1') {
		d.push(line[1] == '1')
		return nil
	}
	if d.op == opLong && len(line) > 0 && line[len(line)-1] == 'L' {
		line = line[:len(line)-1]
	}
	digits := line
	if len(digits) > 0 && (digits[0] == '-' || digits[0] == '+') {
		digits = digits[1:]
	}
	if len(digits) > d.maxDigits {
		return d.tooManyDigits(at)
	}
	if len(digits) == 0 || digitsFrom(digits) != len(digits) {
		return d.failAt(textError(line), "%.40q is not a decimal integer", line)
	}
	if digits[0] == '0' && len(digits) > 1 {
		// Python reads it as octal (INT) or refuses it (LONG).
		return d.failAt(ErrUnsupported, "%.40q: leading zeros", line)
	}
	if len(digits) <= 18 {
		n, _ := strconv.ParseInt(string(line), 10, 64) // cannot fail: checked above
		d.push(n)
		return nil
	}
	z, _ := new(big.Int).SetString(string(line), 10)
	d.push(normalize(z))
	return nil
}

func (d *decoder) tooManyDigits(at int) error {
	d.pos = min(len(d.data), at+d.maxDigits+1)
	return d.fail(ErrDigits, "the integer at byte %d has more than %d digits (Python refuses to read such a pickle too)", at, d.maxDigits)
}

// digitsFrom counts the decimal digits b starts with, after a sign.
func digitsFrom(b []byte) int {
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		b = b[1:]
	}
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	return n
}

// fromTwosComplement returns the integer of LONG1 and LONG4: b is
// little-endian two's complement, empty for 0.
func fromTwosComplement(b []byte) any {
	if len(b) <= 8 {
		var u uint64
		for i := len(b) - 1; i >= 0; i-- {
			u = u<<8 | uint64(b[i])
		}
		if len(b) > 0 && len(b) < 8 && b[len(b)-1]&0x80 != 0 {
			u |= ^uint64(0) << (8 * len(b)) // sign-extend
		}
		return int64(u)
	}
	be := make([]byte, len(b))
	for i, c := range b {
		be[len(b)-1-i] = c
	}
	z := new(big.Int).SetBytes(be)
	if b[len(b)-1]&0x80 != 0 {
		z.Sub(z, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return normalize(z)
}

// normalize returns z as an int64 when it fits.
func normalize(z *big.Int) any {
	if z.IsInt64() {
		return z.Int64()
	}
	return z
}

// validUTF8 reports whether b is UTF-8 as Python decodes a str of a
// pickle: with surrogate code points allowed (the surrogatepass error
// handler), which Go's UTF-8 does not allow.
func validUTF8(b []byte) bool {
	if utf8.Valid(b) {
		return true
	}
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			// An encoded surrogate: ED A0-BF 80-BF.
			if len(b) < 3 || b[0] != 0xed || b[1] < 0xa0 || b[1] > 0xbf || b[2] < 0x80 || b[2] > 0xbf {
				return false
			}
			n = 3
		}
		b = b[n:]
	}
	return true
}

// parseFloat parses FLOAT's text: what Python's repr of a float writes
// (digits, sign, point, exponent, inf, nan).
func parseFloat(b []byte) (float64, bool) {
	s := string(b)
	switch strings.ToLower(strings.TrimLeft(s, "+-")) {
	case "inf", "infinity", "nan":
	default:
		if s == "" || strings.Trim(s, "0123456789+-.eE") != "" {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil || isRangeErr(err)
}

// textError is the sentinel of a number's text this decoder does not
// read: ErrUnsupported if Python might (with whitespace, underscores, a
// base prefix, or a NUL, where its C parser stops), else ErrInvalid.
func textError(b []byte) error {
	if bytes.ContainsAny(b, " \t\r\v\f_\x00") {
		return ErrUnsupported
	}
	b = bytes.TrimLeft(b, "+-")
	if len(b) > 1 && b[0] == '0' && bytes.IndexByte([]byte("xXoObB"), b[1]) >= 0 {
		return ErrUnsupported
	}
	return ErrInvalid
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}
