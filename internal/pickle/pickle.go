// Package pickle writes Python pickles: the few opcodes of protocol 2 that
// a memory snapshot needs (dicts, lists, tuples, integers of any size up to
// 64 bits unsigned, strings, booleans, None), with a memo so that a value
// written once (a string, a list of stack frames) is written again as a
// reference of five bytes.
//
// It only writes. It lives apart from the snapshot reader (trace/torchsnap,
// which decodes with internal/unpickle) so that package mr can write
// PyTorch memory snapshots without linking a pickle decoder.
//
// The Writer is a stream of opcodes: a dict is DictStart, then key and
// value pairs, then End; a list is ListStart, items, End; a tuple is
// TupleStart, items, End. The pickle machine's stack does the nesting, so
// the Writer keeps no tree, only the kind of each open container (to
// close it with the right opcode) and the memo. Errors are sticky: the
// first write error is kept and returned by every later call of Err and
// Finish.
package pickle

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"math"
)

// Opcodes of pickle protocol 2 (Python's Lib/pickle.py names them).
const (
	opProto      = 0x80
	opStop       = '.'
	opMark       = '('
	opEmptyDict  = '}'
	opSetItems   = 'u'
	opEmptyList  = ']'
	opAppends    = 'e'
	opTuple      = 't'
	opNone       = 'N'
	opNewTrue    = 0x88
	opNewFalse   = 0x89
	opBinInt     = 'J' // 4-byte signed little-endian
	opBinInt1    = 'K' // 1-byte unsigned
	opLong1      = 0x8a
	opBinUnicode = 'X' // 4-byte length, UTF-8
	opLongBinPut = 'r' // 4-byte memo index
	opLongBinGet = 'j'
)

// ErrUnbalanced is returned when End closes no container, or Finish
// finds one open.
var ErrUnbalanced = errors.New("pickle: unbalanced containers")

type container uint8

const (
	dict container = iota
	list
	tuple
)

// Writer writes one pickle.
type Writer struct {
	w     *bufio.Writer
	err   error
	open  []container
	memo  map[string]uint32 // memo keys of values written with Put
	next  uint32
	strs  map[string]uint32 // memo index of each string written
	small [9]byte
}

// NewWriter starts a pickle on w (protocol 2).
func NewWriter(w io.Writer) *Writer {
	pw := &Writer{w: bufio.NewWriterSize(w, 64<<10), memo: map[string]uint32{}, strs: map[string]uint32{}}
	pw.bytes(opProto, 2)
	return pw
}

func (p *Writer) bytes(b ...byte) {
	if p.err == nil {
		_, p.err = p.w.Write(b)
	}
}

func (p *Writer) op(b byte) {
	if p.err == nil {
		p.err = p.w.WriteByte(b)
	}
}

func (p *Writer) u32(op byte, v uint32) {
	p.small[0] = op
	binary.LittleEndian.PutUint32(p.small[1:5], v)
	p.bytes(p.small[:5]...)
}

// DictStart opens a dict; write key, value pairs, then End.
func (p *Writer) DictStart() {
	p.op(opEmptyDict)
	p.op(opMark)
	p.open = append(p.open, dict)
}

// ListStart opens a list; write its items, then End.
func (p *Writer) ListStart() {
	p.op(opEmptyList)
	p.op(opMark)
	p.open = append(p.open, list)
}

// TupleStart opens a tuple; write its items, then End.
func (p *Writer) TupleStart() {
	p.op(opMark)
	p.open = append(p.open, tuple)
}

// End closes the innermost open container.
func (p *Writer) End() {
	n := len(p.open)
	if n == 0 {
		if p.err == nil {
			p.err = ErrUnbalanced
		}
		return
	}
	switch p.open[n-1] {
	case dict:
		p.op(opSetItems)
	case list:
		p.op(opAppends)
	case tuple:
		p.op(opTuple)
	}
	p.open = p.open[:n-1]
}

// Int writes an int.
func (p *Writer) Int(v int64) {
	switch {
	case v >= 0 && v < 256:
		p.bytes(opBinInt1, byte(v))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		p.u32(opBinInt, uint32(int32(v)))
	default:
		p.long(uint64(v), v < 0)
	}
}

// Uint writes an int (Python's ints have no bound: 1<<64-1 is one).
func (p *Writer) Uint(v uint64) {
	if v <= math.MaxInt32 {
		p.Int(int64(v))
		return
	}
	p.long(v, false)
}

// long writes LONG1: the two's complement of the value, little-endian, in
// as few bytes as keep its sign.
func (p *Writer) long(v uint64, negative bool) {
	var b [9]byte
	binary.LittleEndian.PutUint64(b[:8], v)
	n := 8
	if !negative {
		b[8] = 0 // room for a clear sign bit above bit 63
		n = 9
		for n > 1 && b[n-1] == 0 && b[n-2]&0x80 == 0 {
			n--
		}
	} else {
		for n > 1 && b[n-1] == 0xff && b[n-2]&0x80 != 0 {
			n--
		}
	}
	p.bytes(opLong1, byte(n))
	p.bytes(b[:n]...)
}

// Bool writes True or False.
func (p *Writer) Bool(v bool) {
	if v {
		p.op(opNewTrue)
	} else {
		p.op(opNewFalse)
	}
}

// None writes None.
func (p *Writer) None() { p.op(opNone) }

// String writes a str. A string written before is written as a reference
// to the first (the reader gets the same object, as Python's own pickler
// does for repeated strings).
func (p *Writer) String(s string) {
	if i, ok := p.strs[s]; ok {
		p.u32(opLongBinGet, i)
		return
	}
	p.u32(opBinUnicode, uint32(len(s)))
	if p.err == nil {
		_, p.err = p.w.WriteString(s)
	}
	p.strs[s] = p.next
	p.u32(opLongBinPut, p.next)
	p.next++
}

// Put remembers the value just written (the innermost complete value:
// call it right after End or a scalar) under key, so that Get can write it
// again as a reference.
func (p *Writer) Put(key string) {
	p.memo[key] = p.next
	p.u32(opLongBinPut, p.next)
	p.next++
}

// Get writes the value remembered under key, and reports whether there
// was one (if not, it writes nothing).
func (p *Writer) Get(key string) bool {
	i, ok := p.memo[key]
	if ok {
		p.u32(opLongBinGet, i)
	}
	return ok
}

// Err returns the first error met, if any.
func (p *Writer) Err() error { return p.err }

// Finish writes STOP after the one value written, flushes, and returns the
// first error met. Every container must be closed.
func (p *Writer) Finish() error {
	if len(p.open) != 0 && p.err == nil {
		p.err = ErrUnbalanced
	}
	p.op(opStop)
	if p.err == nil {
		p.err = p.w.Flush()
	}
	return p.err
}
