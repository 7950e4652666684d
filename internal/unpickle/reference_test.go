package unpickle

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"slices"
	"strings"
	"testing"
)

// referenceCase is a pickle Python wrote, and what Python read back from
// it (testdata/gen_reference.py).
type referenceCase struct {
	Name     string `json:"name"`
	Protocol int    `json:"protocol"`
	Pickle   []byte `json:"pickle"`
	Want     string `json:"want"`
	Error    string `json:"error"`
}

func loadReference(t testing.TB) []referenceCase {
	t.Helper()
	data, err := os.ReadFile("testdata/reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Cases []referenceCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Cases) < 100 {
		t.Fatalf("only %d reference cases", len(ref.Cases))
	}
	return ref.Cases
}

var sentinels = map[string]error{"ErrRefused": ErrRefused, "ErrUnsupported": ErrUnsupported}

// Decode reads every pickle Python wrote as Python reads it, sharing
// included, and refuses the ones that construct objects or contain
// themselves.
func TestDecodeMatchesPython(t *testing.T) {
	for _, tc := range loadReference(t) {
		name := fmt.Sprintf("%s/protocol %d", tc.Name, tc.Protocol)
		v, n, err := Decode(tc.Pickle, nil)
		if tc.Error != "" {
			var pe *Error
			if !errors.Is(err, sentinels[tc.Error]) || !errors.As(err, &pe) {
				t.Errorf("%s: error %v, want %s", name, err, tc.Error)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if n != int64(len(tc.Pickle)) {
			t.Errorf("%s: consumed %d of %d bytes", name, n, len(tc.Pickle))
		}
		if got := render(v); got != tc.Want {
			t.Errorf("%s:\n got %.300s\nwant %.300s", name, got, tc.Want)
		}
	}
}

// render writes v as gen_reference.py's render writes the value Python
// reads: containers met more than once labelled by first appearance.
func render(v any) string {
	counts := map[any]int{}
	var count func(x any)
	count = func(x any) {
		if !labelled(x) {
			return
		}
		counts[x]++
		if counts[x] > 1 {
			return
		}
		switch c := x.(type) {
		case *Tuple:
			for _, it := range c.Items {
				count(it)
			}
		case *List:
			for _, it := range c.Items {
				count(it)
			}
		case *Dict:
			for k, w := range c.All() {
				count(k)
				count(w)
			}
		}
	}
	count(v)
	labels := map[any]int{}
	var r func(x any) string
	r = func(x any) string {
		switch x := x.(type) {
		case None:
			return "None"
		case bool:
			if x {
				return "True"
			}
			return "False"
		case int64:
			return fmt.Sprintf("i:%d", x)
		case *big.Int:
			return "i:" + x.String()
		case float64:
			return fmt.Sprintf("f:%016x", math.Float64bits(x))
		case string:
			return "s:" + hex.EncodeToString([]byte(x))
		case Bytes:
			return "b:" + hex.EncodeToString([]byte(x))
		}
		label := ""
		if counts[x] > 1 {
			if n, ok := labels[x]; ok {
				return fmt.Sprintf("#%d", n)
			}
			labels[x] = len(labels) + 1
			label = fmt.Sprintf("#%d=", labels[x])
		}
		join := func(items []any) string {
			s := make([]string, len(items))
			for i, it := range items {
				s[i] = r(it)
			}
			return strings.Join(s, ",")
		}
		switch x := x.(type) {
		case *Tuple:
			return label + "(" + join(x.Items) + ")"
		case *List:
			return label + "[" + join(x.Items) + "]"
		case *Dict:
			var s []string
			for k, w := range x.All() {
				s = append(s, r(k)+":"+r(w))
			}
			return label + "{" + strings.Join(s, ",") + "}"
		case *Set:
			var s []string
			for k := range x.All() {
				s = append(s, r(k))
			}
			slices.Sort(s)
			kind := "set"
			if x.Frozen {
				kind = "frozenset"
			}
			return label + kind + "{" + strings.Join(s, ",") + "}"
		}
		return fmt.Sprintf("?%T", x)
	}
	text := r(v)
	if len(text) > 2000 {
		sum := sha256.Sum256([]byte(text))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	return text
}

// labelled reports whether render labels x when it is shared: any
// container but the empty tuple (one object in Python, never memoized).
func labelled(x any) bool {
	switch c := x.(type) {
	case *Tuple:
		return len(c.Items) > 0
	case *List, *Dict, *Set:
		return true
	}
	return false
}
