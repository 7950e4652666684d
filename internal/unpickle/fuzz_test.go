package unpickle

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os/exec"
	"sync"
	"testing"
	"unsafe"
)

// FuzzDecode decodes any input and checks, without a panic:
//   - a failure is an *Error with one of the sentinels, placed within the
//     input;
//   - a value is acyclic, nested as deep as its containers say and no
//     deeper than the bound, its keys hashable, and no larger than the
//     input (each string's bytes, each container's items, counted once
//     however often they are referenced);
//   - encoding the value and decoding that gives a value that encodes
//     to the same bytes (the sharing is kept);
//   - where python3 is installed, Python's reference unpickler
//     (testdata/reader.py) agrees: a value Decode returns is the one
//     Python returns, and a pickle Decode finds truncated or invalid
//     Python refuses too. (Python may read what Decode refuses as
//     constructing objects, unsupported, too deep or too long.)
func FuzzDecode(f *testing.F) {
	for _, tc := range loadReference(f) {
		f.Add(tc.Pickle)
	}
	for _, s := range []string{
		"\x80\x04]\x94(]\x94(K\x01K\x02eh\x01}\x94\x8c\x01k\x94h\x01sh\x02e.",
		"]\x94]h\x00a0h\x00K\x01a.", "]2a.", "cos\nsystem\n(S'echo'\ntR.", "(I00\nI01\nI-12\nL5L\nF1.5\nl.",
		"K\x01p+3\n0g3\np-0\n.", "\x8c\x05a\xed\xa0\x80b.", "}(K\x01K\x01\x88K\x02u.", "\x8b\xff\xff\xff\x7f.",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, n, err := Decode(data, nil)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || pe.Offset != n || n < 0 || n > int64(len(data)) || v != nil {
				t.Fatalf("error %#v, consumed %d of %d, value %v", err, n, len(data), v)
			}
			if !slicesContainsIs(err, ErrTruncated, ErrInvalid, ErrRefused, ErrUnsupported, ErrDigits, ErrDepth) {
				t.Fatalf("error %v matches no sentinel", err)
			}
		} else {
			if v == nil || n < 1 || n > int64(len(data)) || data[n-1] != opStop {
				t.Fatalf("value %v, consumed %d of %d", v, n, len(data))
			}
			checkValue(t, v, n)
			checkReencoding(t, v)
		}
		compareWithPython(t, data, v, err)
	})
}

func slicesContainsIs(err error, targets ...error) bool {
	for _, target := range targets {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// checkValue checks a decoded value's invariants (see FuzzDecode).
func checkValue(t *testing.T, v any, n int64) {
	depth := map[any]int32{} // containers by pointer, once checked
	active := map[any]bool{}
	strs := map[*byte]bool{}
	size := int64(0)
	str := func(s string) {
		if p := unsafe.StringData(s); len(s) > 0 && !strs[p] {
			strs[p] = true
			size += int64(len(s))
		}
	}
	var walk func(x any) int32
	walk = func(x any) int32 {
		var items []any
		switch c := x.(type) {
		case string:
			str(c)
			return 0
		case Bytes:
			str(string(c))
			return 0
		case *Tuple:
			items = c.Items
		case *List:
			items = c.Items
		case *Dict:
			for k, w := range c.All() {
				if !hashable(k) {
					t.Fatalf("a dict key of type %T", k)
				}
				items = append(items, k, w)
			}
		case *Set:
			for k := range c.All() {
				if !hashable(k) {
					t.Fatalf("a set element of type %T", k)
				}
				items = append(items, k)
			}
		default:
			return 0
		}
		if active[x] {
			t.Fatalf("a %s contains itself", TypeName(x))
		}
		if d, ok := depth[x]; ok {
			return d
		}
		active[x] = true
		size += int64(len(items))
		var d int32 = 1
		for _, it := range items {
			d = max(d, walk(it)+1)
		}
		delete(active, x)
		if d != depthOf(x) || d > DefaultMaxDepth {
			t.Fatalf("a %s of depth %d says %d", TypeName(x), d, depthOf(x))
		}
		depth[x] = d
		return d
	}
	walk(v)
	if size > n {
		t.Fatalf("a value of %d string bytes and items from %d bytes of pickle", size, n)
	}
}

// checkReencoding checks that v encodes, and that what it encodes to
// decodes to a value that encodes the same.
func checkReencoding(t *testing.T, v any) {
	var first, second bytes.Buffer
	if err := Encode(&first, v, 5); err != nil {
		t.Fatalf("encoding a decoded value: %v", err)
	}
	w, _, err := Decode(first.Bytes(), nil)
	if err != nil {
		t.Fatalf("decoding what Encode wrote: %v", err)
	}
	if err := Encode(&second, w, 5); err != nil || !bytes.Equal(first.Bytes(), second.Bytes()) {
		t.Fatalf("a value decoded from its encoding encodes differently (%v):\n%q\n%q", err, first.Bytes(), second.Bytes())
	}
}

// compareWithPython checks Decode's result against Python's unpicklers,
// when python3 is installed: a value must be the one both read, and a
// pickle Decode finds truncated or invalid at least one must refuse.
func compareWithPython(t *testing.T, data []byte, v any, err error) {
	py := pythonReader()
	if py == nil {
		return
	}
	if err == nil && (renderSize(v) > 1<<20 || hasNaNKey(v)) {
		return // too large to render, or keys Python compares by identity
	}
	verdicts, perr := py.read(data)
	if perr != nil {
		t.Fatalf("python3: %v", perr)
	}
	if err != nil {
		if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrInvalid) {
			return // Python may read what Decode refuses as beyond it
		}
		for _, pv := range verdicts {
			if !pv.ok {
				return
			}
		}
		t.Fatalf("Python's unpicklers read %.200s where Decode says %v", verdicts[0].result, err)
	}
	want := render(v)
	for i, pv := range verdicts {
		switch {
		case !pv.ok && (pv.result == "MemoryError" || pv.result == "RecursionError"):
			// beyond what Python can hold
		case !pv.ok:
			t.Fatalf("%s refuses (%s) what Decode reads as %.200s", pythonNames[i], pv.result, want)
		case pv.result != tooLarge && pv.result != want:
			t.Fatalf("%s reads %.300s, Decode %.300s", pythonNames[i], pv.result, want)
		}
	}
}

// renderSize returns about how long render(v) is, without writing it.
func renderSize(v any) int {
	seen := map[any]bool{}
	var size func(x any) int
	size = func(x any) int {
		var items []any
		switch c := x.(type) {
		case string:
			return 2*len(c) + 3
		case Bytes:
			return 2*len(c) + 3
		case *Tuple:
			items = c.Items
		case *List:
			items = c.Items
		case *Dict:
			for k, w := range c.All() {
				items = append(items, k, w)
			}
		case *Set:
			items = []any(c.keys.list)
		default:
			return 24
		}
		if seen[x] {
			return 8
		}
		seen[x] = true
		n := 16
		for _, it := range items {
			n += size(it) + 1
		}
		return n
	}
	return size(v)
}

// hasNaNKey reports whether a dict or set in v holds a NaN, which Python
// finds again only as the same object.
func hasNaNKey(v any) bool {
	seen := map[any]bool{}
	var has func(x any) bool
	has = func(x any) bool {
		if seen[x] {
			return false
		}
		var items []any
		switch c := x.(type) {
		case *Tuple:
			items = c.Items
		case *List:
			items = c.Items
		case *Dict:
			for k, w := range c.All() {
				if f, ok := k.(float64); ok && math.IsNaN(f) {
					return true
				}
				items = append(items, w)
			}
		case *Set:
			for k := range c.All() {
				if f, ok := k.(float64); ok && math.IsNaN(f) {
					return true
				}
			}
		default:
			return false
		}
		seen[x] = true
		for _, it := range items {
			if has(it) {
				return true
			}
		}
		return false
	}
	return has(v)
}

// pyReader is a python3 process running testdata/reader.py.
type pyReader struct {
	mu  sync.Mutex
	in  io.Writer
	out *bufio.Reader
}

var (
	pyOnce sync.Once
	py     *pyReader
)

// pythonReader starts python3 once per process; nil without python3.
func pythonReader() *pyReader {
	pyOnce.Do(func() {
		python, err := exec.LookPath("python3")
		if err != nil {
			return
		}
		cmd := exec.Command(python, "testdata/reader.py")
		in, err1 := cmd.StdinPipe()
		out, err2 := cmd.StdoutPipe()
		if err1 != nil || err2 != nil || cmd.Start() != nil {
			return
		}
		py = &pyReader{in: in, out: bufio.NewReader(out)}
	})
	return py
}

// tooLarge is the result of a value too large to render.
const tooLarge = "too large"

// pythonNames names the unpicklers whose verdicts read returns.
var pythonNames = [2]string{"pickle._Unpickler", "unpickle.Unpickler"}

// pyVerdict is one unpickler's verdict: its rendering of the value (or
// tooLarge), or the name of its exception.
type pyVerdict struct {
	ok     bool
	result string
}

// read has Python's two unpicklers read data.
func (p *pyReader) read(data []byte) ([2]pyVerdict, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out [2]pyVerdict
	var head [4]byte
	binary.LittleEndian.PutUint32(head[:], uint32(len(data)))
	if _, err := p.in.Write(append(head[:], data...)); err != nil {
		return out, err
	}
	line, err := p.out.ReadBytes('\n')
	if err != nil {
		return out, err
	}
	type verdict struct {
		OK  *string `json:"ok"`
		Big bool    `json:"big"`
		Err string  `json:"err"`
	}
	var r struct{ Pure, C verdict }
	if err := json.Unmarshal(line, &r); err != nil {
		return out, err
	}
	for i, v := range []verdict{r.Pure, r.C} {
		switch {
		case v.Big:
			out[i] = pyVerdict{true, tooLarge}
		case v.OK != nil:
			out[i] = pyVerdict{true, *v.OK}
		default:
			out[i] = pyVerdict{false, v.Err}
		}
	}
	return out, nil
}
