package unpickle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// dictOf builds a *Dict of key and value pairs, in order.
func dictOf(t testing.TB, kv ...any) *Dict {
	t.Helper()
	d := NewDict()
	for i := 0; i < len(kv); i += 2 {
		if err := d.Set(kv[i], kv[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// Encode writes the bytes Python's pickler writes (protocol 3, which has
// no frames), memo entries included.
func TestEncodeAsPython(t *testing.T) {
	v := dictOf(t,
		"device_traces", []any{[]any{dictOf(t, "action", "alloc", "addr", int64(1<<40), "size", -5, "frames", &List{})}},
		"x", &Tuple{Items: []any{1, 2.5, None{}, true, new(big.Int).Lsh(big.NewInt(1), 64), new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), 70))}},
		"b", Bytes("ab"))
	// pickle.dumps(v, 3) of the same dict, on Python 3.11.
	want := "\x80\x03}q\x00(X\r\x00\x00\x00device_tracesq\x01]q\x02]q\x03}q\x04(X\x06\x00\x00\x00actionq\x05X\x05\x00\x00\x00allocq\x06X\x04\x00\x00\x00addrq\x07\x8a\x06\x00\x00\x00\x00\x00\x01X\x04\x00\x00\x00sizeq\x08J\xfb\xff\xff\xffX\x06\x00\x00\x00framesq\t]q\nuaaX\x01\x00\x00\x00xq\x0b(K\x01G@\x04\x00\x00\x00\x00\x00\x00N\x88\x8a\t\x00\x00\x00\x00\x00\x00\x00\x00\x01\x8a\t\x00\x00\x00\x00\x00\x00\x00\x00\xc0tq\x0cX\x01\x00\x00\x00bq\rC\x02abq\x0eu."
	var buf bytes.Buffer
	if err := Encode(&buf, v, 3); err != nil {
		t.Fatal(err)
	}
	if buf.String() != want {
		t.Errorf("got  %q\nwant %q", buf.String(), want)
	}
}

// What Encode writes decodes to the value it was given, sharing included,
// in every protocol the value's types allow: every reference value
// Python wrote, decoded and encoded again, renders as Python rendered it.
func TestEncodeRoundTrip(t *testing.T) {
	for _, tc := range loadReference(t) {
		if tc.Error != "" || tc.Protocol != 5 {
			continue
		}
		v, _, err := Decode(tc.Pickle, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.Name, err)
		}
		for proto := 2; proto <= 5; proto++ {
			var buf bytes.Buffer
			err := Encode(&buf, v, proto)
			if err != nil {
				// Bytes need protocol 3, sets 4.
				if !errors.Is(err, ErrUnsupported) || proto >= 4 {
					t.Errorf("%s, protocol %d: %v", tc.Name, proto, err)
				}
				continue
			}
			w, n, err := Decode(buf.Bytes(), nil)
			if err != nil || n != int64(buf.Len()) {
				t.Errorf("%s, protocol %d: decoding what Encode wrote: %v", tc.Name, proto, err)
				continue
			}
			if got := render(w); got != tc.Want {
				t.Errorf("%s, protocol %d:\n got %.300s\nwant %.300s", tc.Name, proto, got, tc.Want)
			}
		}
	}
}

// Python reads what Encode writes as Decode does (when python3 is
// installed: the reference renderer is Python's).
func TestEncodeReadByPython(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	type item struct {
		Name   string `json:"name"`
		Pickle []byte `json:"pickle"`
		Want   string `json:"want"`
	}
	var items []item
	for _, tc := range loadReference(t) {
		if tc.Error != "" || tc.Protocol != 5 {
			continue
		}
		v, _, err := Decode(tc.Pickle, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, proto := range []int{2, 4} {
			var buf bytes.Buffer
			if err := Encode(&buf, v, proto); err == nil {
				items = append(items, item{fmt.Sprintf("%s/protocol %d", tc.Name, proto), buf.Bytes(), tc.Want})
			}
		}
	}
	in, err := json.Marshal(items)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	script := `
import base64, json, pickle, sys
sys.path.insert(0, sys.argv[1])
from gen_reference import render
for it in json.load(sys.stdin):
    print(json.dumps(render(pickle.loads(base64.b64decode(it["pickle"])))))
`
	cmd := exec.Command(python, "-c", script, dir)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(items) || len(items) < 40 {
		t.Fatalf("python3 read %d of %d pickles", len(lines), len(items))
	}
	for i, it := range items {
		var got string
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil || got != it.Want {
			t.Errorf("%s: Python read %.300s, want %.300s (%v)", it.Name, lines[i], it.Want, err)
		}
	}
}

// Encode refuses what Decode would refuse, and what Python would write as
// calls to constructors.
func TestEncodeErrors(t *testing.T) {
	self := &List{}
	self.Items = []any{self}
	loop := []any{nil}
	loop[0] = loop
	var deep any = int64(1)
	for range DefaultMaxDepth + 1 { // one list too many
		deep = []any{deep}
	}
	tests := []struct {
		name  string
		v     any
		proto int
		err   error
	}{
		{"protocol 1", None{}, 1, ErrUnsupported},
		{"protocol 6", None{}, 6, ErrUnsupported},
		{"a list in itself", self, 4, ErrUnsupported},
		{"a slice in itself", loop, 4, ErrDepth},
		{"too deep", deep, 4, ErrDepth},
		{"a struct", struct{}{}, 4, ErrUnsupported},
		{"bytes in protocol 2", Bytes("x"), 2, ErrUnsupported},
		{"a set in protocol 3", NewSet(false), 3, ErrUnsupported},
		{"a list key", map[any]any{"a": 1, &List{}: 1}, 4, ErrUnsupported},
		{"a tuple key", map[any]any{&Tuple{}: 1}, 4, ErrUnsupported},
	}
	for _, tc := range tests {
		err := Encode(&bytes.Buffer{}, tc.v, tc.proto)
		if !errors.Is(err, tc.err) || !strings.HasPrefix(fmt.Sprint(err), "unpickle: encode: ") {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
		}
	}
	// Depth within the bound is written.
	var ok any = int64(1)
	for range DefaultMaxDepth {
		ok = []any{ok}
	}
	var buf bytes.Buffer
	if err := Encode(&buf, ok, 4); err != nil {
		t.Fatalf("%d levels: %v", DefaultMaxDepth, err)
	}
	if v, _, err := Decode(buf.Bytes(), nil); err != nil || depthOf(v) != DefaultMaxDepth {
		t.Errorf("decoding %d levels: %v", DefaultMaxDepth, err)
	}
}

// Go maps are written in key order, so that the same value always gives
// the same pickle, and Go ints of any size as Python ints.
func TestEncodeGoForms(t *testing.T) {
	v := map[any]any{"b": uint64(1 << 63), "a": []byte("x"), 3: int8(-4), nil: map[string]any{"z": 1, "y": uint16(2)}, true: []any{}}
	var first []byte
	for i := range 5 {
		var buf bytes.Buffer
		if err := Encode(&buf, v, 4); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = buf.Bytes()
		} else if !bytes.Equal(buf.Bytes(), first) {
			t.Fatal("two encodings of one map differ")
		}
	}
	w, _, err := Decode(first, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "{None:{s:79:i:2,s:7a:i:1},True:[],i:3:i:-4,s:61:b:78,s:62:i:9223372036854775808}"
	if got := render(w); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
