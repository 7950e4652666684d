// Package unpickle decodes and encodes the plain values of Python's pickle
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
//
// Where CPython's two unpicklers differ, Decode does what the reference
// one, the pure-Python pickle._Unpickler, does: a FRAME may not begin
// before the last one ends, nor an argument cross a frame's end, and
// APPENDS or ADDITEMS of nothing still need a list or a set. What Decode
// reads, both read alike.
package unpickle

import (
	"encoding/binary"
	"fmt"
	"math"
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

	// The last FRAME: where it is, and where its bytes end.
	frameAt, frameEnd int

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
		// A hint for buffered readers, with two rules (those of Python's
		// reference unpickler, pickle._Unpickler): no argument crosses a
		// frame's end, and a frame starts where the last one ended.
		b, err := d.take(8)
		if err != nil {
			return err
		}
		if d.pos < d.frameEnd {
			return d.failAt(ErrInvalid, "a frame that starts before the frame at byte %d ends", d.frameAt)
		}
		n := binary.LittleEndian.Uint64(b)
		if n > uint64(len(d.data)-d.pos) {
			return d.truncated(n)
		}
		d.frameAt, d.frameEnd = d.opAt, d.pos+int(n)

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
		s, ok := d.stack[k-1].(*Set)
		if !ok || s.Frozen {
			return d.failAt(ErrInvalid, "ADDITEMS to a %s", TypeName(d.stack[k-1]))
		}
		if k == len(d.stack) {
			return nil // nothing to add
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
