// Package pickle decodes and encodes the plain values of Python's pickle
// format: None, bool, int, float, str, bytes, bytearray, tuple, list,
// dict, set and frozenset, in protocols 2 to 5 (and the same values in
// the binary opcodes of protocol 1). It is what trace/torchsnap reads
// PyTorch memory snapshots with: dictionaries, lists, strings and numbers
// that Python's pickler shares (a memo reference to an object written
// before), which a decoder must keep shared.
//
// Decoding is a stack machine over a byte slice, one opcode at a time,
// without recursion. It never imports a name, constructs an object or
// calls anything: the opcodes that would (GLOBAL, REDUCE, BUILD, ...) are
// refused with ErrRefused. What it allocates is justified by the input: a
// declared length is checked against the bytes left before anything is
// allocated, each stack entry, memo entry and container item costs at
// least one byte of input, a string is copied once, and decimal integers
// are refused beyond Options.MaxDigits digits before their quadratic
// conversion. A decoded value is acyclic and nested at most
// Options.MaxDepth deep (value.go), so that code walking it recursively
// is bounded too; walking it naively may still visit a shared container
// once per reference, which its user bounds (trace/torchsnap counts what
// it visits).
package pickle

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Defaults of Options.
const (
	// DefaultMaxDigits is Python's own limit on converting decimal text
	// to an int (sys.int_info.default_max_str_digits, Python 3.11 and
	// later): its unpickler refuses a longer INT or LONG too.
	DefaultMaxDigits = 4300
	// DefaultMaxDepth is Python's default recursion limit: deeper values
	// are ones Python itself could not print or copy.
	DefaultMaxDepth = 1000
)

// Options bound what decoding may cost; the zero value (or nil) gives the
// defaults.
type Options struct {
	// MaxDigits bounds the decimal digits of an INT or LONG opcode's
	// integer (ErrDigits beyond it); 0 means DefaultMaxDigits.
	MaxDigits int
	// MaxDepth bounds how deeply containers nest (ErrDepth beyond it); 0
	// means DefaultMaxDepth.
	MaxDepth int
}

// Decode decodes the pickle at the start of data and returns its value
// and the number of bytes up to and including its STOP opcode; bytes after
// STOP are ignored, as Python ignores them. Any failure is an *Error.
func Decode(data []byte, o *Options) (v any, n int64, err error) {
	d := decoder{data: data, maxDigits: DefaultMaxDigits, maxDepth: DefaultMaxDepth}
	if o != nil && o.MaxDigits > 0 {
		d.maxDigits = o.MaxDigits
	}
	if o != nil && o.MaxDepth > 0 {
		d.maxDepth = int32(min(o.MaxDepth, math.MaxInt32))
	}
	v, err = d.run()
	return v, int64(d.pos), err
}

// decoder is the state of one Decode.
type decoder struct {
	data  []byte
	pos   int  // the next byte to read
	op    byte // the opcode being decoded
	opAt  int  // where it is
	stack []any
	marks []int // stack heights at each MARK; the last is the fence

	// The memo: entries by index, dense from 0 (nil is absent: no
	// decoded value is nil), and those beyond the dense part in sparse.
	memo    []any
	sparse  map[uint64]any
	memoLen int // entries, for MEMOIZE

	maxDigits int
	maxDepth  int32
}

func (d *decoder) run() (any, error) {
	for d.pos < len(d.data) {
		d.opAt, d.op = d.pos, d.data[d.pos]
		d.pos++
		if d.op == opStop {
			return d.pop()
		}
		if err := d.step(); err != nil {
			return nil, err
		}
	}
	d.op = 0
	return nil, d.fail(ErrTruncated, "the input ends before the pickle's STOP opcode")
}

// step decodes one opcode other than STOP.
func (d *decoder) step() error {
	switch d.op {
	case opProto:
		b, err := d.take(1)
		if err != nil {
			return err
		}
		if b[0] > highestProtocol {
			return d.failAt(ErrUnsupported, "protocol %d (Python writes 0 to %d)", b[0], highestProtocol)
		}
	case opFrame:
		// A hint for buffered readers; its length must still be there.
		b, err := d.take(8)
		if err != nil {
			return err
		}
		if n := binary.LittleEndian.Uint64(b); n > uint64(len(d.data)-d.pos) {
			return d.truncated(n)
		}

	case opNone:
		d.push(None{})
	case opNewTrue:
		d.push(true)
	case opNewFalse:
		d.push(false)
	case opBinInt:
		b, err := d.take(4)
		if err != nil {
			return err
		}
		d.push(int64(int32(binary.LittleEndian.Uint32(b))))
	case opBinInt1:
		b, err := d.take(1)
		if err != nil {
			return err
		}
		d.push(int64(b[0]))
	case opBinInt2:
		b, err := d.take(2)
		if err != nil {
			return err
		}
		d.push(int64(binary.LittleEndian.Uint16(b)))
	case opLong1, opLong4:
		b, err := d.counted(d.op == opLong4, lengthSize(d.op, opLong1, opLong4))
		if err != nil {
			return err
		}
		d.push(fromTwosComplement(b))
	case opInt, opLong:
		return d.decimal()
	case opBinFloat:
		b, err := d.take(8)
		if err != nil {
			return err
		}
		d.push(math.Float64frombits(binary.BigEndian.Uint64(b)))
	case opFloat:
		line, err := d.line(len(d.data))
		if err != nil {
			return err
		}
		f, ok := parseFloat(line)
		if !ok {
			return d.failAt(textError(line), "%.40q is not a float as Python's pickler writes one", line)
		}
		d.push(f)

	case opShortBinUnicode, opBinUnicode, opBinUnicode8:
		b, err := d.counted(false, lengthSize(d.op, opShortBinUnicode, opBinUnicode))
		if err != nil {
			return err
		}
		if !validUTF8(b) {
			return d.failAt(ErrInvalid, "a str that is not UTF-8")
		}
		d.push(string(b))
	case opShortBinString, opBinString:
		// A Python 2 str: Python 3 reads it as ASCII text by default.
		b, err := d.counted(d.op == opBinString, lengthSize(d.op, opShortBinString, opBinString))
		if err != nil {
			return err
		}
		for _, c := range b {
			if c >= 0x80 {
				return d.failAt(ErrUnsupported, "a Python 2 string that is not ASCII")
			}
		}
		d.push(string(b))
	case opShortBinBytes, opBinBytes, opBinBytes8, opByteArray8:
		size := lengthSize(d.op, opShortBinBytes, opBinBytes)
		if d.op == opByteArray8 {
			size = 8
		}
		b, err := d.counted(false, size)
		if err != nil {
			return err
		}
		d.push(Bytes(b))

	case opEmptyTuple:
		d.push(&Tuple{depth: 1})
	case opTuple1, opTuple2, opTuple3:
		n := int(d.op-opTuple1) + 1
		if len(d.stack)-n < d.fence() {
			return d.underflow()
		}
		return d.tuple(len(d.stack) - n)
	case opTuple:
		k, err := d.popMark()
		if err != nil {
			return err
		}
		return d.tuple(k)
	case opEmptyList:
		d.push(&List{shape: shape{depth: 1}})
	case opList:
		k, err := d.popMark()
		if err != nil {
			return err
		}
		l := &List{shape: shape{depth: 1}}
		if err := d.appendItems(l, k); err != nil {
			return err
		}
		d.push(l)
	case opAppend:
		if len(d.stack)-1 <= d.fence() {
			return d.underflow()
		}
		return d.appendTo(len(d.stack) - 1)
	case opAppends:
		k, err := d.popMark()
		if err != nil {
			return err
		}
		if k <= d.fence() {
			return d.underflow()
		}
		return d.appendTo(k)
	case opEmptyDict:
		d.push(&Dict{shape: shape{depth: 1}})
	case opDict:
		k, err := d.popMark()
		if err != nil {
			return err
		}
		m := &Dict{shape: shape{depth: 1}}
		if err := d.setItems(m, k); err != nil {
			return err
		}
		d.push(m)
	case opSetItem:
		if len(d.stack)-2 <= d.fence() {
			return d.underflow()
		}
		return d.setItemsOf(len(d.stack) - 2)
	case opSetItems:
		k, err := d.popMark()
		if err != nil {
			return err
		}
		if k <= d.fence() {
			return d.underflow()
		}
		return d.setItemsOf(k)
	case opEmptySet:
		d.push(&Set{shape: shape{depth: 1}})
	case opFrozenSet:
		k, err := d.popMark()
		if err != nil {
			return err
		}
		s := &Set{Frozen: true, shape: shape{depth: 1}}
		if err := d.addItems(s, k); err != nil {
			return err
		}
		d.push(s)
	case opAddItems:
		k, err := d.popMark()
		if err != nil {
			return err
		}
		if k <= d.fence() {
			return d.underflow()
		}
		if k == len(d.stack) {
			return nil // nothing to add: Python does not look at the set
		}
		s, ok := d.stack[k-1].(*Set)
		if !ok || s.Frozen {
			return d.failAt(ErrInvalid, "ADDITEMS to a %s", TypeName(d.stack[k-1]))
		}
		return d.addItems(s, k)

	case opMark:
		d.marks = append(d.marks, len(d.stack))
	case opPop:
		if len(d.stack) > d.fence() {
			_, err := d.pop()
			return err
		}
		if _, err := d.popMark(); err != nil {
			return d.underflow()
		}
	case opPopMark:
		k, err := d.popMark()
		if err != nil {
			return err
		}
		d.truncateStack(k)
	case opDup:
		v, err := d.top()
		if err != nil {
			return err
		}
		d.push(v)

	case opPut, opBinPut, opLongBinPut, opMemoize:
		idx := uint64(d.memoLen)
		if d.op != opMemoize {
			var err error
			if idx, err = d.memoIndex(opPut, opBinPut); err != nil {
				return err
			}
		}
		v, err := d.top()
		if err != nil {
			return err
		}
		d.memoPut(idx, v)
	case opGet, opBinGet, opLongBinGet:
		idx, err := d.memoIndex(opGet, opBinGet)
		if err != nil {
			return err
		}
		v, ok := d.memoGet(idx)
		if !ok {
			return d.failAt(ErrInvalid, "no memo entry %d", idx)
		}
		d.push(v)

	case opGlobal, opStackGlobal, opInst:
		return d.failAt(ErrRefused, "it would import a name")
	case opReduce, opObj, opNewObj, opNewObjEx, opBuild:
		return d.failAt(ErrRefused, "it would construct an object or call a function")
	case opPersID, opBinPersID:
		return d.failAt(ErrRefused, "it would ask the unpickler for a persistent object")
	case opExt1, opExt2, opExt4:
		return d.failAt(ErrRefused, "it would import a name from the extension registry")
	case opString, opUnicode:
		return d.failAt(ErrUnsupported, "protocol-0 text strings are not read")
	case opNextBuffer, opReadOnlyBuffer:
		return d.failAt(ErrUnsupported, "out-of-band buffers are not read")
	default:
		return d.failAt(ErrInvalid, "unknown opcode %#02x", d.op)
	}
	return nil
}

// --- Arguments ---------------------------------------------------------

// take returns the next n bytes of the input.
func (d *decoder) take(n uint64) ([]byte, error) {
	if n > uint64(len(d.data)-d.pos) {
		return nil, d.truncated(n)
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
// must come within max bytes, and moves past the newline.
func (d *decoder) line(max int) ([]byte, error) {
	rest := d.data[d.pos:]
	window := rest[:min(len(rest), max+1)]
	i := bytes.IndexByte(window, '\n')
	if i < 0 {
		if len(window) == len(rest) {
			d.pos = len(d.data)
			return nil, d.fail(ErrTruncated, "the input ends inside %s's line at byte %d", opName(d.op), d.opAt+1)
		}
		return nil, d.failAt(ErrInvalid, "a line longer than %d bytes", max)
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

// --- The stack and the marks ---------------------------------------------

// fence is the height below which the stack is out of reach: the last
// MARK's.
func (d *decoder) fence() int {
	if len(d.marks) == 0 {
		return 0
	}
	return d.marks[len(d.marks)-1]
}

func (d *decoder) push(v any) { d.stack = append(d.stack, v) }

func (d *decoder) top() (any, error) {
	if len(d.stack) <= d.fence() {
		return nil, d.underflow()
	}
	return d.stack[len(d.stack)-1], nil
}

func (d *decoder) pop() (any, error) {
	v, err := d.top()
	if err != nil {
		return nil, err
	}
	d.truncateStack(len(d.stack) - 1)
	return v, nil
}

// truncateStack drops the entries from height k up, clearing them for
// the garbage collector.
func (d *decoder) truncateStack(k int) {
	clear(d.stack[k:])
	d.stack = d.stack[:k]
}

// popMark removes the last MARK and returns its height.
func (d *decoder) popMark() (int, error) {
	if len(d.marks) == 0 {
		return 0, d.failAt(ErrInvalid, "no MARK to pop")
	}
	k := d.marks[len(d.marks)-1]
	d.marks = d.marks[:len(d.marks)-1]
	return k, nil
}

// --- Containers ------------------------------------------------------------

// place checks that item may go into the container c, whose depth is
// *depth: c must not be item itself, and its depth with item in it must
// be within the bound. It then seals item, which may not change from now
// on, and updates c's depth.
func (d *decoder) place(c any, depth *int32, item any) error {
	if item == c {
		return d.failAt(ErrUnsupported, "a %s that contains itself", TypeName(c))
	}
	id := depthOf(item) + 1
	if id > d.maxDepth {
		return d.failAt(ErrDepth, "containers nested more than %d deep", d.maxDepth)
	}
	if is := shapeOf(item); is != nil {
		is.sealed = true
	}
	if id > *depth {
		*depth = id
	}
	return nil
}

// changeable checks that a container may still take items.
func (d *decoder) changeable(c any, s *shape) error {
	if s.sealed {
		return d.failAt(ErrUnsupported, "a %s changed after it was placed in another container (a cycle, or a pickle Python's pickler does not write)", TypeName(c))
	}
	return nil
}

// tuple replaces the stack entries from height k with a tuple of them.
func (d *decoder) tuple(k int) error {
	t := &Tuple{Items: make([]any, len(d.stack)-k), depth: 1}
	for i, v := range d.stack[k:] {
		if err := d.place(t, &t.depth, v); err != nil {
			return err
		}
		t.Items[i] = v
	}
	d.truncateStack(k)
	d.push(t)
	return nil
}

// appendTo appends the stack entries from height k to the list below
// them, and drops them.
func (d *decoder) appendTo(k int) error {
	if k == len(d.stack) {
		return nil // nothing to append: Python does not look at the list
	}
	l, ok := d.stack[k-1].(*List)
	if !ok {
		sentinel := ErrInvalid
		if _, ok := d.stack[k-1].(Bytes); ok {
			sentinel = ErrUnsupported // a bytearray, which Python extends
		}
		return d.failAt(sentinel, "%s to a %s", opName(d.op), TypeName(d.stack[k-1]))
	}
	return d.appendItems(l, k)
}

// appendItems appends the stack entries from height k to l, and drops
// them.
func (d *decoder) appendItems(l *List, k int) error {
	if err := d.changeable(l, &l.shape); err != nil {
		return err
	}
	l.Items = slices.Grow(l.Items, len(d.stack)-k) // amortized, as append
	for _, v := range d.stack[k:] {
		if err := d.place(l, &l.depth, v); err != nil {
			return err
		}
		l.Items = append(l.Items, v)
	}
	d.truncateStack(k)
	return nil
}

// setItemsOf sets the key and value pairs on the stack from height k in
// the dict below them, and drops them.
func (d *decoder) setItemsOf(k int) error {
	if k == len(d.stack) {
		return nil
	}
	m, ok := d.stack[k-1].(*Dict)
	if !ok {
		sentinel := ErrInvalid
		switch d.stack[k-1].(type) {
		case *List, Bytes:
			sentinel = ErrUnsupported // Python sets items by index
		}
		return d.failAt(sentinel, "%s on a %s", opName(d.op), TypeName(d.stack[k-1]))
	}
	return d.setItems(m, k)
}

// setItems sets the key and value pairs on the stack from height k in m,
// and drops them.
func (d *decoder) setItems(m *Dict, k int) error {
	if (len(d.stack)-k)%2 != 0 {
		return d.failAt(ErrInvalid, "an odd number of items for %s", opName(d.op))
	}
	if err := d.changeable(m, &m.shape); err != nil {
		return err
	}
	m.keys.list = slices.Grow(m.keys.list, (len(d.stack)-k)/2)
	m.vals = slices.Grow(m.vals, (len(d.stack)-k)/2)
	for i := k; i < len(d.stack); i += 2 {
		key, v := d.stack[i], d.stack[i+1]
		if err := d.checkKey(key); err != nil {
			return err
		}
		if err := d.place(m, &m.depth, v); err != nil {
			return err
		}
		m.put(key, v)
	}
	d.truncateStack(k)
	return nil
}

// addItems adds the stack entries from height k to s, and drops them.
func (d *decoder) addItems(s *Set, k int) error {
	if err := d.changeable(s, &s.shape); err != nil {
		return err
	}
	for _, v := range d.stack[k:] {
		if err := d.checkKey(v); err != nil {
			return err
		}
		s.keys.add(v)
	}
	d.truncateStack(k)
	return nil
}

// checkKey checks a dict key or set element.
func (d *decoder) checkKey(v any) error {
	if hashable(v) {
		return nil
	}
	switch v.(type) {
	case *List, *Dict:
		return d.failAt(ErrInvalid, "a %s as a dict key or set element (unhashable in Python)", TypeName(v))
	case *Set:
		if !v.(*Set).Frozen {
			return d.failAt(ErrInvalid, "a set as a dict key or set element (unhashable in Python)")
		}
	}
	return d.failAt(ErrUnsupported, "a %s as a dict key or set element", TypeName(v))
}

// --- The memo ------------------------------------------------------------

func (d *decoder) memoPut(idx uint64, v any) {
	switch {
	case idx < uint64(len(d.memo)):
		if d.memo[idx] == nil {
			d.memoLen++
		}
		d.memo[idx] = v
	case idx == uint64(len(d.memo)):
		if _, ok := d.sparse[idx]; ok {
			delete(d.sparse, idx)
		} else {
			d.memoLen++
		}
		d.memo = append(d.memo, v)
	default:
		if d.sparse == nil {
			d.sparse = make(map[uint64]any)
		}
		if _, ok := d.sparse[idx]; !ok {
			d.memoLen++
		}
		d.sparse[idx] = v
	}
}

func (d *decoder) memoGet(idx uint64) (any, bool) {
	if idx < uint64(len(d.memo)) {
		v := d.memo[idx]
		return v, v != nil
	}
	v, ok := d.sparse[idx]
	return v, ok
}

// --- Errors ----------------------------------------------------------------

// fail returns an *Error at the current position.
func (d *decoder) fail(sentinel error, format string, args ...any) error {
	return &Error{Offset: int64(d.pos), Op: d.op, Err: sentinel, Detail: fmt.Sprintf(format, args...)}
}

// failAt returns an *Error about the current opcode, naming it.
func (d *decoder) failAt(sentinel error, format string, args ...any) error {
	return &Error{Offset: int64(d.pos), Op: d.op, Err: sentinel,
		Detail: fmt.Sprintf("%s at byte %d: ", opName(d.op), d.opAt) + fmt.Sprintf(format, args...)}
}

// truncated is the error of an argument of n bytes that the input does
// not hold: decoding stops at the end of the input, having allocated
// nothing for it.
func (d *decoder) truncated(n uint64) error {
	left := len(d.data) - d.pos
	d.pos = len(d.data)
	return &Error{Offset: int64(d.pos), Op: d.op, Err: ErrTruncated,
		Detail: fmt.Sprintf("%s at byte %d: %d bytes declared, %d left", opName(d.op), d.opAt, n, left)}
}

func (d *decoder) underflow() error {
	return d.failAt(ErrInvalid, "stack underflow")
}

// TypeName names the Python type of a decoded value, for messages.
func TypeName(v any) string {
	switch v := v.(type) {
	case None:
		return "None"
	case bool:
		return "bool"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case Bytes:
		return "bytes"
	case *Tuple:
		return "tuple"
	case *List:
		return "list"
	case *Dict:
		return "dict"
	case *Set:
		if v.Frozen {
			return "frozenset"
		}
		return "set"
	}
	return fmt.Sprintf("%T", v)
}
