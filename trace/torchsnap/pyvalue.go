// Python values as og-rek decodes them: ints are int64 or *big.Int,
// dictionaries map[any]any, lists []any. These helpers read the ones a
// snapshot holds and name the others in errors.

package torchsnap

import (
	"errors"
	"fmt"
	"math/big"

	pickle "github.com/kisielk/og-rek"
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
		if v.IsInt64() {
			return uint64(v.Int64()), nil
		}
		return 0, fmt.Errorf("integer %v does not fit in 64 bits", v)
	case nil:
		return 0, errors.New("missing")
	}
	return 0, fmt.Errorf("expected an int, got %s", pyType(x))
}

// pyType names the Python type of a decoded value, for error messages.
func pyType(x any) string {
	switch x.(type) {
	case nil:
		return "nothing"
	case pickle.None:
		return "None"
	case map[any]any:
		return "dict"
	case []any:
		return "list"
	case pickle.Tuple:
		return "tuple"
	case string, pickle.ByteString:
		return "str"
	case pickle.Bytes:
		return "bytes"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case bool:
		return "bool"
	}
	return fmt.Sprintf("%T", x)
}
