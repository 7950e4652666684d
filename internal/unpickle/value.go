// The Go values of Python's plain types.
//
// Decode returns, and Encode accepts:
//
//	None                 None
//	bool                 bool
//	int                  int64, or *big.Int outside int64 (never one inside)
//	float                float64
//	str                  string (the UTF-8 bytes as written)
//	bytes, bytearray     Bytes
//	tuple                *Tuple
//	list                 *List
//	dict                 *Dict (insertion order kept)
//	set, frozenset       *Set (Frozen says which)
//
// Containers are pointers, so that an object the pickle references twice
// (a memo reference) is one Go value, and an item added through one
// reference is seen through every other: Python's pickler memoizes a list
// or a dict while it is still empty and fills it afterwards.
//
// Invariants of a decoded value: it has no cycles (a container that would
// contain itself is refused with ErrUnsupported), its containers are
// nested at most Options.MaxDepth deep, and dict keys and set elements are
// None, bool, int64, float64, string or Bytes, compared as Go compares
// them: unlike Python, 1, 1.0 and True are three keys. A container is
// complete before it is placed in another (the decoder refuses to change
// one afterwards), which is what keeps it acyclic and its depth exact.

package unpickle

import (
	"fmt"
	"iter"
	"math"
	"math/big"
	"slices"
)

// None is Python's None.
type None struct{}

// Bytes is Python's bytes or bytearray.
type Bytes string

// Tuple is Python's tuple.
type Tuple struct {
	Items []any
	depth int32
}

// List is Python's list.
type List struct {
	Items []any
	shape
}

// Set is Python's set, or frozenset when Frozen: elements in the order
// they were first added.
type Set struct {
	Frozen bool
	keys   keyed
	shape
}

// Dict is Python's dict: keys in the order they were first set.
type Dict struct {
	keys keyed
	vals []any
	shape
}

// shape is what the decoder keeps of a mutable container: how deep it is,
// and whether it has been placed in another container (after which it
// may not change).
type shape struct {
	depth  int32
	sealed bool
}

// NewDict returns an empty dict.
func NewDict() *Dict { return &Dict{} }

// Len returns the number of keys.
func (d *Dict) Len() int { return len(d.keys.list) }

// Get returns the value of key, and whether the dict has it.
func (d *Dict) Get(key any) (any, bool) {
	if i := d.keys.find(key); i >= 0 {
		return d.vals[i], true
	}
	return nil, false
}

// Set sets key to value. A key equal to one the dict has (as Python
// compares them: 1, 1.0 and True are equal) keeps that key and its place.
// A key must be None, bool, int64, float64, string or Bytes: any other is
// an error matching ErrUnsupported, and the dict is unchanged.
func (d *Dict) Set(key, value any) error {
	if !hashable(key) {
		return fmt.Errorf("%w: a dict key of type %T", ErrUnsupported, key)
	}
	d.put(key, value)
	return nil
}

// put sets a key known to be hashable.
func (d *Dict) put(key, value any) {
	if i, added := d.keys.add(key); !added {
		d.vals[i] = value
		return
	}
	d.vals = append(d.vals, value)
}

// All yields the keys and values in insertion order.
func (d *Dict) All() iter.Seq2[any, any] {
	return func(yield func(any, any) bool) {
		for i, k := range d.keys.list {
			if !yield(k, d.vals[i]) {
				return
			}
		}
	}
}

// NewSet returns an empty set, or frozenset if frozen.
func NewSet(frozen bool) *Set { return &Set{Frozen: frozen} }

// Len returns the number of elements.
func (s *Set) Len() int { return len(s.keys.list) }

// Has reports whether the set holds v (as Python compares them).
func (s *Set) Has(v any) bool { return s.keys.find(v) >= 0 }

// Add adds v unless the set holds an equal element. v must be None, bool,
// int64, float64, string or Bytes: any other is an error matching
// ErrUnsupported, and the set is unchanged.
func (s *Set) Add(v any) error {
	if !hashable(v) {
		return fmt.Errorf("%w: a set element of type %T", ErrUnsupported, v)
	}
	s.keys.add(v)
	return nil
}

// All yields the elements in the order they were added.
func (s *Set) All() iter.Seq[any] { return slices.Values(s.keys.list) }

// keyed is the keys of a dict or the elements of a set: a list in
// insertion order and, once it is large, an index by Python equality.
type keyed struct {
	list  []any
	index map[any]int // pyKey(key) -> position; nil while small
}

// indexAt is the size from which keys are indexed: below it, a scan is
// faster than hashing (a snapshot's dicts have under a dozen keys).
const indexAt = 16

// find returns the position of a key equal to k, or -1.
func (ks *keyed) find(k any) int {
	if !hashable(k) {
		return -1 // and no panic hashing it
	}
	pk := pyKey(k)
	if ks.index != nil {
		if i, ok := ks.index[pk]; ok {
			return i
		}
		return -1
	}
	for i, have := range ks.list {
		if pyKey(have) == pk {
			return i
		}
	}
	return -1
}

// add adds k, known to be hashable, unless an equal key is there; it
// returns k's position and whether it was added.
func (ks *keyed) add(k any) (int, bool) {
	if i := ks.find(k); i >= 0 {
		return i, false
	}
	ks.list = append(ks.list, k)
	i := len(ks.list) - 1
	if ks.index != nil {
		ks.index[pyKey(k)] = i
	} else if len(ks.list) >= indexAt {
		ks.index = make(map[any]int, 2*len(ks.list))
		for j, have := range ks.list {
			ks.index[pyKey(have)] = j
		}
	}
	return i, true
}

// hashable reports whether v may be a dict key or a set element here.
func hashable(v any) bool {
	switch v.(type) {
	case None, bool, int64, float64, string, Bytes:
		return true
	}
	return false
}

// pyKey returns a value that Go compares as Python compares k: a bool or
// a float with an integral value as the int64 it equals (True == 1 ==
// 1.0, and -0.0 == 0).
func pyKey(k any) any {
	switch k := k.(type) {
	case bool:
		if k {
			return int64(1)
		}
		return int64(0)
	case float64:
		if k == math.Trunc(k) && k >= -(1<<63) && k < 1<<63 {
			return int64(k)
		}
	}
	return k
}

// depthOf returns how deeply containers nest in v: 0 for a scalar, 1 for
// a container of scalars.
func depthOf(v any) int32 {
	switch c := v.(type) {
	case *List:
		return c.depth
	case *Dict:
		return c.depth
	case *Set:
		return c.depth
	case *Tuple:
		return c.depth
	}
	return 0
}

// shapeOf returns the shape of a mutable container, or nil.
func shapeOf(v any) *shape {
	switch c := v.(type) {
	case *List:
		return &c.shape
	case *Dict:
		return &c.shape
	case *Set:
		return &c.shape
	}
	return nil
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
