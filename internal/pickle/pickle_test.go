package pickle_test

import (
	"bytes"
	"errors"
	"math"
	"math/big"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/internal/pickle"
	"github.com/streamalloc/streamalloc/internal/unpickle"
)

// sample writes {"ints": [...], "s": "héllo", "again": "héllo", "t": (True,
// False, None), "frames": [<list>, <the same list>], "empty": {}}.
func sample(w *pickle.Writer) {
	w.DictStart()
	w.String("ints")
	w.ListStart()
	for _, v := range []int64{0, 255, 256, -1, math.MaxInt32, math.MinInt32, 1 << 40, -(1 << 40), math.MaxInt64, math.MinInt64} {
		w.Int(v)
	}
	for _, v := range []uint64{1 << 31, 1 << 63, math.MaxUint64} {
		w.Uint(v)
	}
	w.End()
	w.String("s")
	w.String("héllo")
	w.String("again")
	w.String("héllo")
	w.String("t")
	w.TupleStart()
	w.Bool(true)
	w.Bool(false)
	w.None()
	w.End()
	w.String("frames")
	w.ListStart()
	w.ListStart()
	w.Int(7)
	w.End()
	w.Put("frames-7")
	if !w.Get("frames-7") {
		panic("no memo")
	}
	w.End()
	w.String("empty")
	w.DictStart()
	w.End()
	w.End()
}

func bigOf(s string) *big.Int {
	v, _ := new(big.Int).SetString(s, 10)
	return v
}

// TestDecode: internal/unpickle (the decoder of trace/torchsnap) reads
// what the writer wrote, the memo reference as the same list.
func TestDecode(t *testing.T) {
	var buf bytes.Buffer
	w := pickle.NewWriter(&buf)
	sample(w)
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	n := int64(buf.Len())
	v, consumed, err := unpickle.Decode(buf.Bytes(), nil)
	if err != nil || consumed != n {
		t.Fatalf("decoded %d of %d bytes: %v", consumed, n, err)
	}
	d, ok := v.(*unpickle.Dict)
	if !ok {
		t.Fatalf("decoded %T", v)
	}
	m := map[any]any{}
	for k, v := range d.All() {
		m[k] = v
	}
	ints := m["ints"].(*unpickle.List).Items
	want := []string{"0", "255", "256", "-1", "2147483647", "-2147483648", "1099511627776", "-1099511627776",
		"9223372036854775807", "-9223372036854775808", "2147483648", "9223372036854775808", "18446744073709551615"}
	if len(ints) != len(want) {
		t.Fatalf("ints %v", ints)
	}
	for i := range want {
		var got *big.Int
		switch v := ints[i].(type) {
		case int64:
			got = big.NewInt(v)
		case *big.Int:
			got = v
		default:
			t.Fatalf("int %d decoded as %T", i, v)
		}
		if got.Cmp(bigOf(want[i])) != 0 {
			t.Errorf("int %d = %v, want %s", i, got, want[i])
		}
	}
	if m["s"] != "héllo" || m["again"] != "héllo" {
		t.Errorf("strings %q %q", m["s"], m["again"])
	}
	if tu, ok := m["t"].(*unpickle.Tuple); !ok || len(tu.Items) != 3 || tu.Items[0] != true || tu.Items[1] != false || tu.Items[2] != (unpickle.None{}) {
		t.Errorf("tuple %#v", m["t"])
	}
	fr := m["frames"].(*unpickle.List).Items
	if len(fr) != 2 || !reflect.DeepEqual(fr[0].(*unpickle.List).Items, []any{int64(7)}) || fr[1] != fr[0] {
		t.Errorf("frames %#v", fr)
	}
	if e, ok := m["empty"].(*unpickle.Dict); !ok || e.Len() != 0 {
		t.Errorf("empty %#v", m["empty"])
	}
}

// TestPython: Python's own pickle module loads it, with the same values.
func TestPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	var buf bytes.Buffer
	w := pickle.NewWriter(&buf)
	sample(w)
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", `import pickle, sys
d = pickle.load(sys.stdin.buffer)
assert d["frames"][0] is d["frames"][1]
print(repr(d))`)
	cmd.Stdin = &buf
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	want := "{'ints': [0, 255, 256, -1, 2147483647, -2147483648, 1099511627776, -1099511627776, " +
		"9223372036854775807, -9223372036854775808, 2147483648, 9223372036854775808, 18446744073709551615], " +
		"'s': 'héllo', 'again': 'héllo', 't': (True, False, None), 'frames': [[7], [7]], 'empty': {}}"
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("python read\n%s\nwant\n%s", got, want)
	}
}

// TestUnbalanced: an End with nothing open, or a Finish with something
// open, is ErrUnbalanced; a write error is kept.
func TestErrors(t *testing.T) {
	w := pickle.NewWriter(&bytes.Buffer{})
	w.End()
	if err := w.Finish(); !errors.Is(err, pickle.ErrUnbalanced) {
		t.Errorf("End of nothing: %v", err)
	}
	w = pickle.NewWriter(&bytes.Buffer{})
	w.ListStart()
	if err := w.Finish(); !errors.Is(err, pickle.ErrUnbalanced) {
		t.Errorf("open list: %v", err)
	}
	w = pickle.NewWriter(failWriter{})
	w.String(strings.Repeat("x", 100<<10)) // more than the buffer: reaches the writer
	if err := w.Finish(); !errors.Is(err, errWrite) || !errors.Is(w.Err(), errWrite) {
		t.Errorf("write error: %v", err)
	}
	if w.Get("nothing") {
		t.Error("Get of a key never Put")
	}
}

var errWrite = errors.New("disk full")

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errWrite }
