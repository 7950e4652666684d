// The encoder: values to pickles that Python and Decode read alike.
//
// Encode writes what Python's pickler writes for the same values, less
// its FRAME opcodes (which are optional): the shortest integer and string
// opcodes, lists and dicts filled in batches of 1000 after they are
// memoized, and a memo reference for an object met again. As Python's
// pickler, it knows an object by identity: a container by its pointer, a
// string or bytes by where its bytes are (one Go string assigned twice is
// one object; two equal strings made apart are two), so that meeting one
// again costs no hashing of its text. A value that Decode would refuse is
// refused here too: a container that contains itself, a dict key or set
// element of a type Decode does not hash, nesting beyond DefaultMaxDepth,
// bytes below protocol 3 and sets below protocol 4 (where Python writes
// them as calls to constructors).

package unpickle

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"math"
	"math/big"
	"slices"
	"unsafe"
)

// batchSize is how many items Python's pickler puts under one MARK.
const batchSize = 1000

// Encode writes v to w as a pickle of the given protocol (2 to 5). v is
// made of the values Decode returns (value.go), and for convenience of Go
// ints of any size, []byte as bytes, []any as a list and map[any]any or
// map[string]any as a dict (written in key order). An error wraps
// ErrUnsupported or ErrDepth for a value it cannot write; what was
// written before it is then not a whole pickle.
func Encode(w io.Writer, v any, protocol int) error {
	if protocol < 2 || protocol > highestProtocol {
		return fmt.Errorf("unpickle: encode: %w: protocol %d (2 to %d are written)", ErrUnsupported, protocol, highestProtocol)
	}
	e := encoder{w: bufio.NewWriter(w), proto: protocol, memo: map[any]uint32{}, active: map[any]bool{}}
	e.w.Write([]byte{opProto, byte(protocol)})
	if err := e.value(v); err != nil {
		return fmt.Errorf("unpickle: encode: %w", err)
	}
	e.w.WriteByte(opStop)
	return e.w.Flush()
}

type encoder struct {
	w      *bufio.Writer
	proto  int
	memo   map[any]uint32 // containers by pointer, strings and bytes by textID
	n      uint64         // memo entries written, those not in memo too
	active map[any]bool   // containers being written
	depth  int
}

func (e *encoder) value(v any) error {
	switch v := v.(type) {
	case nil, None:
		e.w.WriteByte(opNone)
	case bool:
		if v {
			e.w.WriteByte(opNewTrue)
		} else {
			e.w.WriteByte(opNewFalse)
		}
	case int:
		e.int(int64(v))
	case int8:
		e.int(int64(v))
	case int16:
		e.int(int64(v))
	case int32:
		e.int(int64(v))
	case int64:
		e.int(v)
	case uint:
		e.uint(uint64(v))
	case uint8:
		e.int(int64(v))
	case uint16:
		e.int(int64(v))
	case uint32:
		e.int(int64(v))
	case uint64:
		e.uint(v)
	case *big.Int:
		if v.IsInt64() {
			e.int(v.Int64())
		} else {
			e.long(twosComplement(v))
		}
	case float64:
		var b [9]byte
		b[0] = opBinFloat
		binary.BigEndian.PutUint64(b[1:], math.Float64bits(v))
		e.w.Write(b[:])
	case string:
		return e.str(v)
	case Bytes:
		return e.bytes(v)
	case []byte:
		return e.bytes(Bytes(v))
	case *Tuple:
		return e.container(v, func() error { return e.tuple(v, v.Items) })
	case *List:
		return e.container(v, func() error { return e.list(v, v.Items) })
	case []any:
		return e.nested(func() error { return e.list(nil, v) })
	case *Dict:
		return e.container(v, func() error { return e.dict(v, v.keys.list, v.vals) })
	case map[any]any:
		keys, vals, err := sortedItems(v)
		if err != nil {
			return err
		}
		return e.nested(func() error { return e.dict(nil, keys, vals) })
	case map[string]any:
		keys, vals := make([]any, 0, len(v)), make([]any, 0, len(v))
		for _, k := range slices.Sorted(maps.Keys(v)) {
			keys, vals = append(keys, k), append(vals, v[k])
		}
		return e.nested(func() error { return e.dict(nil, keys, vals) })
	case *Set:
		return e.container(v, func() error { return e.set(v) })
	default:
		return fmt.Errorf("%w: a value of type %T", ErrUnsupported, v)
	}
	return nil
}

// container writes c, a pointer, with write, or a memo reference if it
// was written before.
func (e *encoder) container(c any, write func() error) error {
	if e.active[c] {
		return fmt.Errorf("%w: a %s that contains itself", ErrUnsupported, TypeName(c))
	}
	if idx, ok := e.memo[c]; ok {
		e.get(idx)
		return nil
	}
	e.active[c] = true
	defer delete(e.active, c)
	return e.nested(write)
}

// nested runs write one container deeper.
func (e *encoder) nested(write func() error) error {
	e.depth++
	defer func() { e.depth-- }()
	if e.depth > DefaultMaxDepth {
		return fmt.Errorf("%w: containers nested more than %d deep", ErrDepth, DefaultMaxDepth)
	}
	return write()
}

func (e *encoder) int(n int64) {
	switch {
	case n >= 0 && n < 1<<8:
		e.w.Write([]byte{opBinInt1, byte(n)})
	case n >= 0 && n < 1<<16:
		e.w.Write([]byte{opBinInt2, byte(n), byte(n >> 8)})
	case n >= math.MinInt32 && n <= math.MaxInt32:
		var b [5]byte
		b[0] = opBinInt
		binary.LittleEndian.PutUint32(b[1:], uint32(n))
		e.w.Write(b[:])
	default:
		e.long(twosComplement(big.NewInt(n)))
	}
}

func (e *encoder) uint(n uint64) {
	if n <= math.MaxInt64 {
		e.int(int64(n))
		return
	}
	e.long(twosComplement(new(big.Int).SetUint64(n)))
}

// long writes LONG1 or LONG4 of little-endian two's complement bytes.
func (e *encoder) long(b []byte) {
	if len(b) < 256 {
		e.w.Write([]byte{opLong1, byte(len(b))})
	} else {
		var h [5]byte
		h[0] = opLong4
		binary.LittleEndian.PutUint32(h[1:], uint32(len(b)))
		e.w.Write(h[:])
	}
	e.w.Write(b)
}

// twosComplement returns z as the fewest little-endian two's complement
// bytes that hold it (none for 0), as Python's pickler writes it.
func twosComplement(z *big.Int) []byte {
	if z.Sign() == 0 {
		return nil
	}
	u := new(big.Int).Set(z)
	if z.Sign() < 0 {
		u.Neg(u).Sub(u, big.NewInt(1)) // -z-1 has the bits a negative z needs
	}
	n := u.BitLen()/8 + 1 // and one for the sign
	if z.Sign() < 0 {
		u.Lsh(big.NewInt(1), uint(8*n)).Add(u, z) // 2^(8n) + z
	}
	b := u.FillBytes(make([]byte, n))
	slices.Reverse(b)
	return b
}

// textID is a string's identity: where its bytes are, and how many.
type textID struct {
	p      *byte
	n      int
	binary bool // bytes, not str
}

func (e *encoder) str(s string) error {
	id := textID{unsafe.StringData(s), len(s), false}
	if idx, ok := e.memo[id]; ok {
		e.get(idx)
		return nil
	}
	switch {
	case e.proto >= 4 && len(s) < 256:
		e.w.Write([]byte{opShortBinUnicode, byte(len(s))})
	case uint64(len(s)) <= math.MaxUint32:
		e.length(opBinUnicode, 4, uint64(len(s)))
	case e.proto >= 4:
		e.length(opBinUnicode8, 8, uint64(len(s)))
	default:
		return fmt.Errorf("%w: a string of %d bytes below protocol 4", ErrUnsupported, len(s))
	}
	e.w.WriteString(s)
	return e.memoize(id)
}

func (e *encoder) bytes(b Bytes) error {
	if e.proto < 3 {
		return fmt.Errorf("%w: bytes below protocol 3", ErrUnsupported)
	}
	id := textID{unsafe.StringData(string(b)), len(b), true}
	if idx, ok := e.memo[id]; ok {
		e.get(idx)
		return nil
	}
	switch {
	case len(b) < 256:
		e.w.Write([]byte{opShortBinBytes, byte(len(b))})
	case uint64(len(b)) <= math.MaxUint32:
		e.length(opBinBytes, 4, uint64(len(b)))
	case e.proto >= 4:
		e.length(opBinBytes8, 8, uint64(len(b)))
	default:
		return fmt.Errorf("%w: bytes of %d bytes below protocol 4", ErrUnsupported, len(b))
	}
	e.w.WriteString(string(b))
	return e.memoize(id)
}

// length writes op and a little-endian length of size bytes.
func (e *encoder) length(op byte, size int, n uint64) {
	var b [9]byte
	b[0] = op
	binary.LittleEndian.PutUint64(b[1:], n)
	e.w.Write(b[:1+size])
}

// The containers: key is the container for the memo, or nil for a Go
// slice or map, which has no identity to share.

func (e *encoder) tuple(key any, items []any) error {
	if len(items) == 0 {
		e.w.WriteByte(opEmptyTuple)
		return nil // Python's pickler does not memoize ()
	}
	if len(items) > 3 {
		e.w.WriteByte(opMark)
	}
	for _, v := range items {
		if err := e.value(v); err != nil {
			return err
		}
	}
	switch len(items) {
	case 1, 2, 3:
		e.w.WriteByte(opTuple1 + byte(len(items)-1))
	default:
		e.w.WriteByte(opTuple)
	}
	return e.memoize(key)
}

func (e *encoder) list(key any, items []any) error {
	e.w.WriteByte(opEmptyList)
	if err := e.memoize(key); err != nil {
		return err
	}
	return e.batches(len(items), opAppend, opAppends, func(i int) error { return e.value(items[i]) })
}

func (e *encoder) dict(key any, keys, vals []any) error {
	e.w.WriteByte(opEmptyDict)
	if err := e.memoize(key); err != nil {
		return err
	}
	return e.batches(len(keys), opSetItem, opSetItems, func(i int) error {
		if err := e.value(keys[i]); err != nil {
			return err
		}
		return e.value(vals[i])
	})
}

func (e *encoder) set(s *Set) error {
	if e.proto < 4 {
		return fmt.Errorf("%w: a set below protocol 4", ErrUnsupported)
	}
	items := s.keys.list
	if s.Frozen {
		e.w.WriteByte(opMark)
		for _, v := range items {
			if err := e.value(v); err != nil {
				return err
			}
		}
		e.w.WriteByte(opFrozenSet)
		return e.memoize(s)
	}
	e.w.WriteByte(opEmptySet)
	if err := e.memoize(s); err != nil {
		return err
	}
	// ADDITEMS has no one-item form.
	for i := 0; i < len(items); i += batchSize {
		e.w.WriteByte(opMark)
		for _, v := range items[i:min(len(items), i+batchSize)] {
			if err := e.value(v); err != nil {
				return err
			}
		}
		e.w.WriteByte(opAddItems)
	}
	return nil
}

// batches writes n items with write, under a MARK and many (a batch of
// one: one), as Python's pickler does.
func (e *encoder) batches(n int, one, many byte, write func(i int) error) error {
	for i := 0; i < n; i += batchSize {
		k := min(n-i, batchSize)
		if k > 1 {
			e.w.WriteByte(opMark)
		}
		for j := i; j < i+k; j++ {
			if err := write(j); err != nil {
				return err
			}
		}
		if k > 1 {
			e.w.WriteByte(many)
		} else {
			e.w.WriteByte(one)
		}
	}
	return nil
}

// memoize puts the value just written in the memo, as Python's pickler
// does, and remembers it under key unless key is nil (a Go slice or map,
// which has no identity to meet again).
func (e *encoder) memoize(key any) error {
	if e.n >= math.MaxUint32 {
		return fmt.Errorf("%w: more than %d memo entries", ErrUnsupported, uint32(math.MaxUint32))
	}
	idx := uint32(e.n)
	e.n++
	if key != nil {
		e.memo[key] = idx
	}
	switch {
	case e.proto >= 4:
		e.w.WriteByte(opMemoize)
	case idx < 256:
		e.w.Write([]byte{opBinPut, byte(idx)})
	default:
		var b [5]byte
		b[0] = opLongBinPut
		binary.LittleEndian.PutUint32(b[1:], idx)
		e.w.Write(b[:])
	}
	return nil
}

func (e *encoder) get(idx uint32) {
	if idx < 256 {
		e.w.Write([]byte{opBinGet, byte(idx)})
		return
	}
	var b [5]byte
	b[0] = opLongBinGet
	binary.LittleEndian.PutUint32(b[1:], idx)
	e.w.Write(b[:])
}

// sortedItems returns the keys of m, Go ints as int64, and their
// values, in a fixed order: by type (None, bool, int, float, str, bytes),
// then by value. A key of another type is an error.
func sortedItems[V any](m map[any]V) (keys, vals []any, err error) {
	type item struct{ k, v any }
	items := make([]item, 0, len(m))
	for k, v := range m {
		if nk := goInt(k); hashable(nk) {
			items = append(items, item{nk, v})
		} else {
			return nil, nil, fmt.Errorf("%w: a dict key or set element of type %T", ErrUnsupported, k)
		}
	}
	slices.SortFunc(items, func(a, b item) int { return compareKeys(a.k, b.k) })
	keys, vals = make([]any, len(items)), make([]any, len(items))
	for i, it := range items {
		keys[i], vals[i] = it.k, it.v
	}
	return keys, vals, nil
}

func compareKeys(a, b any) int {
	if c := cmp.Compare(keyRank(a), keyRank(b)); c != 0 {
		return c
	}
	switch a := a.(type) {
	case bool:
		if a == b.(bool) {
			return 0
		} else if a {
			return 1
		}
		return -1
	case int64:
		return cmp.Compare(a, b.(int64))
	case float64:
		return cmp.Compare(a, b.(float64))
	case string:
		return cmp.Compare(a, b.(string))
	case Bytes:
		return cmp.Compare(a, b.(Bytes))
	}
	return 0
}

func keyRank(v any) int {
	switch v.(type) {
	case None:
		return 0
	case bool:
		return 1
	case int64:
		return 2
	case float64:
		return 3
	case string:
		return 4
	case Bytes:
		return 5
	}
	return 6
}

// goInt returns a Go int of any size as an int64, where it fits, and nil
// as None: the forms dict keys are compared in.
func goInt(v any) any {
	switch n := v.(type) {
	case nil:
		return None{}
	case int:
		return int64(n)
	case int8:
		return int64(n)
	case int16:
		return int64(n)
	case int32:
		return int64(n)
	case uint:
		if uint64(n) <= math.MaxInt64 {
			return int64(n)
		}
	case uint8:
		return int64(n)
	case uint16:
		return int64(n)
	case uint32:
		return int64(n)
	case uint64:
		if n <= math.MaxInt64 {
			return int64(n)
		}
	}
	return v
}
