// Python values as internal/pickle decodes them: ints are int64, or
// *big.Int beyond int64; dicts are *unpickle.Dict, lists *unpickle.List. These
// helpers read the ones a snapshot holds and name the others in errors.

package torchsnap

import (
	"errors"
	"fmt"
	"math/big"

	"github.com/streamalloc/streamalloc/internal/unpickle"
)

// asUint64 accepts a Python int as an address or a stream handle. Negative
// values are the two's complement of a pointer that libtorch stored in an
// int64, so they keep their bits.
func asUint64(x any) (uint64, error) {
	switch v := x.(type) {
	case int64:
		return uint64(v), nil
	case *big.Int:
		if v.IsUint64() {
			return v.Uint64(), nil
		}
		return 0, fmt.Errorf("integer %v does not fit in 64 bits", v)
	case nil:
		return 0, errors.New("missing")
	}
	return 0, fmt.Errorf("expected an int, got %s", pyType(x))
}

// asInt64 accepts a Python int that fits an int64.
func asInt64(x any) (int64, error) {
	switch v := x.(type) {
	case int64:
		return v, nil
	case *big.Int: // never one that fits: the decoder makes those int64
		return 0, fmt.Errorf("integer %v does not fit in 64 bits", v)
	case nil:
		return 0, errors.New("missing")
	}
	return 0, fmt.Errorf("expected an int, got %s", pyType(x))
}

// asString accepts a Python str.
func asString(x any) (string, bool) {
	s, ok := x.(string)
	return s, ok
}

// field returns the value of key in d, or nil if d is not a dict or has
// no such key.
func field(d any, key string) any {
	m, ok := d.(*unpickle.Dict)
	if !ok {
		return nil
	}
	v, _ := m.Get(key)
	return v
}

// pyType names the Python type of a decoded value, for error messages.
func pyType(x any) string {
	if x == nil {
		return "nothing"
	}
	return unpickle.TypeName(x)
}
