package unpickle

import (
	"errors"
	"math"
	"math/big"
	"runtime"
	"strings"
	"testing"
)

// Opcodes and forms that Python's pickler of protocols 2 to 5 does not
// write for the reference values, decoded as Python decodes them.
func TestDecodeForms(t *testing.T) {
	big70 := new(big.Int).Lsh(big.NewInt(1), 70)
	tests := []struct {
		name string
		data string
		want string // render(value)
		n    int64  // bytes consumed, if not all
	}{
		{"INT bools", "(I00\nI01\nl.", "[False,True]", 0},
		{"INT", "(I-12\nI+7\nI0\nI-0\nl.", "[i:-12,i:7,i:0,i:0]", 0},
		{"INT beyond int64", "I" + big70.String() + "\n.", "i:" + big70.String(), 0},
		{"LONG", "(L123L\nL-9223372036854775809\nl.", "[i:123,i:-9223372036854775809]", 0},
		{"FLOAT", "(F1.5\nF-0.0\nFinf\nF-Infinity\nF1e400\nl.",
			"[f:3ff8000000000000,f:8000000000000000,f:7ff0000000000000,f:fff0000000000000,f:7ff0000000000000]", 0},
		{"LONG1", "(\x8a\x00\x8a\x01\xff\x8a\x01\x7f\x8a\x02\x80\x00\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\xffl.",
			"[i:0,i:-1,i:127,i:128,i:9223372036854775807,i:-9223372036854775808]", 0},
		{"LONG4 padded", "\x8b\x0a\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00.", "i:1", 0},
		{"BINUNICODE8 BINBYTES8 BYTEARRAY8",
			"(\x8d\x02\x00\x00\x00\x00\x00\x00\x00hi\x8e\x01\x00\x00\x00\x00\x00\x00\x00\x00\x96\x00\x00\x00\x00\x00\x00\x00\x00l.",
			"[s:6869,b:00,b:]", 0},
		{"SHORT_BINSTRING BINSTRING", "(U\x02abT\x01\x00\x00\x00cl.", "[s:6162,s:63]", 0},
		{"str with a surrogate, as Python writes one", "\x8c\x05a\xed\xa0\x80b.", "s:61eda08062", 0},
		{"PUT and GET with signs", "K\x01p+3\n0g3\np-0\n.", "i:1", 0},
		{"LIST DICT TUPLE", "((K\x01K\x02t(K\x03K\x04d(l(tl.", "[(i:1,i:2),{i:3:i:4},[],()]", 0},
		{"POP POP_MARK DUP", "(K\x01K\x02(K\x03K\x041K\x050K\x062l.", "[i:1,i:2,i:6,i:6]", 0},
		{"POP of an empty frame pops the MARK", "K\x01(0.", "i:1", 0},
		{"PUT GET text", "(K\x05p7\ng7\nl.", "[i:5,i:5]", 0},
		{"sparse memo", "]r\xff\xff\xff\xff0]q\x010j\xff\xff\xff\xff.", "[]", 0},
		{"memo overwritten", "K\x01q\x000K\x02q\x000h\x00.", "i:2", 0},
		{"MEMOIZE counts entries", "K\x01q\x05K\x02\x940h\x01.", "i:2", 0},
		{"APPENDS of nothing", "](e.", "[]", 0},
		{"SETITEMS of nothing to a non-dict", "K\x01(u.", "i:1", 0},
		{"a frame whose header ends its enclosing frame", "\x95\x0a\x00\x00\x00\x00\x00\x00\x00(\x95\x00\x00\x00\x00\x00\x00\x00\x00N.", "None", 0},
		{"frames one after another, and bytes outside any", "\x95\x02\x00\x00\x00\x00\x00\x00\x00](\x95\x03\x00\x00\x00\x00\x00\x00\x00K\x01eC\x01a.", "b:61", 0},
		{"keys equal as Python's", "}(K\x01K\x01\x88K\x02G?\xf0\x00\x00\x00\x00\x00\x00K\x03u.", "{i:1:i:3}", 0},
		{"set elements equal as Python's", "\x8f(K\x00\x89G\x00\x00\x00\x00\x00\x00\x00\x00\x90.", "set{i:0}", 0},
		{"trailing bytes ignored", "N.garbage", "None", 2},
		{"PROTO anywhere, FRAME within the input", "\x80\x05\x95\x02\x00\x00\x00\x00\x00\x00\x00\x80\x02N.", "None", 0},
	}
	for _, tc := range tests {
		v, n, err := Decode([]byte(tc.data), nil)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		want := tc.n
		if want == 0 {
			want = int64(len(tc.data))
		}
		if n != want {
			t.Errorf("%s: consumed %d bytes, want %d", tc.name, n, want)
		}
		if got := render(v); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
}

// Each bad input stops decoding with an *Error: the sentinel, where it
// stopped, and what it says.
func TestDecodeErrors(t *testing.T) {
	deep := strings.Repeat("]", 1002) + strings.Repeat("a", 1001) + "."
	tests := []struct {
		name   string
		data   string
		err    error
		offset int64
		detail string
	}{
		{"empty", "", ErrTruncated, 0, "ends before"},
		{"no STOP", "\x80\x02N", ErrTruncated, 3, "ends before"},
		{"protocol 6", "\x80\x06N.", ErrUnsupported, 2, "PROTO at byte 0: protocol 6"},
		{"unknown opcode", "\x80\x02\xff.", ErrInvalid, 3, "unknown opcode 0xff"},
		{"STOP on an empty stack", ".", ErrInvalid, 1, "stack underflow"},
		{"SETITEM underflow", "\x80\x02s.", ErrInvalid, 3, "SETITEM at byte 2: stack underflow"},
		{"APPEND below the MARK", "]K\x01(a.", ErrInvalid, 5, "stack underflow"},
		{"APPENDS onto nothing", "(K\x01e.", ErrInvalid, 4, "stack underflow"},
		{"POP of nothing", "0", ErrInvalid, 1, "stack underflow"},
		{"POP_MARK without MARK", "N1", ErrInvalid, 2, "no MARK"},
		{"TUPLE3 of two", "K\x01K\x02\x87.", ErrInvalid, 5, "stack underflow"},
		{"BINUNICODE longer than the input", "X\xff\xff\xff\xffabc.", ErrTruncated, 9, "4294967295 bytes declared, 4 left"},
		{"BINUNICODE8 of 2^63", "\x8d\x00\x00\x00\x00\x00\x00\x00\x80.", ErrTruncated, 10, "9223372036854775808 bytes declared, 1 left"},
		{"BINBYTES8 longer than the input", "\x8e\x05\x00\x00\x00\x00\x00\x00\x00abc", ErrTruncated, 12, "5 bytes declared, 3 left"},
		{"LONG4 of 2^31-1 bytes", "\x8b\xff\xff\xff\x7f.", ErrTruncated, 6, "2147483647 bytes declared"},
		{"LONG4 of a negative length", "\x8b\xff\xff\xff\xff.", ErrInvalid, 5, "a negative length, -1"},
		{"BINSTRING of a negative length", "T\x00\x00\x00\x80.", ErrInvalid, 5, "a negative length"},
		{"FRAME longer than the input", "\x95\x10\x00\x00\x00\x00\x00\x00\x00N.", ErrTruncated, 11, "16 bytes declared, 2 left"},
		{"argument cut short", "J\x01\x02", ErrTruncated, 3, "BININT at byte 0: 4 bytes declared, 2 left"},
		{"GLOBAL", "cos\nsystem\n(S'echo'\ntR.", ErrRefused, 1, "GLOBAL at byte 0: it would import a name"},
		{"STACK_GLOBAL", "\x8c\x02os\x8c\x06system\x93.", ErrRefused, 13, "STACK_GLOBAL at byte 12"},
		{"INST", "(ios\nsystem\n.", ErrRefused, 2, "INST at byte 1"},
		{"REDUCE", "N)R.", ErrRefused, 3, "REDUCE at byte 2: it would construct"},
		{"BUILD", "}}b.", ErrRefused, 3, "BUILD at byte 2"},
		{"NEWOBJ", "N)\x81.", ErrRefused, 3, "NEWOBJ at byte 2"},
		{"NEWOBJ_EX", "N)}\x92.", ErrRefused, 4, "NEWOBJ_EX at byte 3"},
		{"OBJ", "(N)o.", ErrRefused, 4, "OBJ at byte 3"},
		{"PERSID", "P1\n.", ErrRefused, 1, "PERSID at byte 0: it would ask"},
		{"BINPERSID", "NQ.", ErrRefused, 2, "BINPERSID at byte 1"},
		{"EXT1", "\x82\x01.", ErrRefused, 1, "EXT1 at byte 0"},
		{"EXT2", "\x83\x01\x00.", ErrRefused, 1, "EXT2 at byte 0"},
		{"EXT4", "\x84\x01\x00\x00\x00.", ErrRefused, 1, "EXT4 at byte 0"},
		{"STRING", "S'a'\n.", ErrUnsupported, 1, "protocol-0 text strings"},
		{"UNICODE", "Va\n.", ErrUnsupported, 1, "protocol-0 text strings"},
		{"NEXT_BUFFER", "\x97.", ErrUnsupported, 1, "out-of-band buffers"},
		{"READONLY_BUFFER", "N\x98.", ErrUnsupported, 2, "out-of-band buffers"},
		{"BINGET of nothing", "h\x05.", ErrInvalid, 2, "no memo entry 5"},
		{"LONG_BINGET of nothing", "N\x94j\x01\x00\x00\x00.", ErrInvalid, 7, "no memo entry 1"},
		{"GET text of nothing", "g3\n.", ErrInvalid, 3, "no memo entry 3"},
		{"PUT negative", "Np-1\n.", ErrInvalid, 5, "memo index"},
		{"PUT beyond 64 bits", "Np99999999999999999999\n.", ErrUnsupported, 23, "memo index"},
		{"PUT with spaces", "Np 1\n.", ErrUnsupported, 5, "memo index"},
		{"MEMOIZE of nothing", "\x94.", ErrInvalid, 1, "stack underflow"},
		{"APPEND to a dict", "}K\x01a.", ErrInvalid, 4, "APPEND to a dict"},
		{"SETITEMS on a list", "](K\x01K\x02u.", ErrUnsupported, 7, "SETITEMS on a list"},
		{"SETITEM on a tuple", ")K\x01K\x02s.", ErrInvalid, 6, "SETITEM on a tuple"},
		{"APPEND to bytes", "C\x00K\x01a.", ErrUnsupported, 5, "APPEND to a bytes"},
		{"APPENDS to a str", "\x8c\x00(K\x01e.", ErrInvalid, 6, "APPENDS to a str"},
		{"str not UTF-8", "\x8c\x02\xc3\x28.", ErrInvalid, 4, "a str that is not UTF-8"},
		{"str of a lone byte ED", "X\x02\x00\x00\x00\xed\xa0.", ErrInvalid, 7, "not UTF-8"},
		{"ADDITEMS to a frozenset", "(\x91(K\x01\x90.", ErrInvalid, 6, "ADDITEMS to a frozenset"},
		{"APPENDS of nothing to an int", "K\x01(e.", ErrInvalid, 4, "APPENDS to a int"},
		{"ADDITEMS of nothing to a list", "](\x90.", ErrInvalid, 3, "ADDITEMS to a list"},
		{"a frame inside a frame", "\x95\x0b\x00\x00\x00\x00\x00\x00\x00(\x95\x00\x00\x00\x00\x00\x00\x00\x00N.", ErrInvalid, 19,
			"FRAME at byte 10: a frame that starts before the frame at byte 0 ends"},
		{"an argument across a frame's end", "\x95\x03\x00\x00\x00\x00\x00\x00\x00NJ\x01\x02\x03\x04.", ErrInvalid, 11,
			"BININT at byte 10: 4 bytes of argument cross the end of the frame at byte 0"},
		{"a line across a frame's end", "\x95\x03\x00\x00\x00\x00\x00\x00\x00I12\n.", ErrInvalid, 10,
			"INT at byte 9: a line that crosses the end of the frame at byte 0"},
		{"odd SETITEMS", "}(K\x01u.", ErrInvalid, 5, "an odd number of items for SETITEMS"},
		{"odd DICT", "(K\x01d.", ErrInvalid, 4, "an odd number of items for DICT"},
		{"list key", "}]K\x01s.", ErrInvalid, 5, "a list as a dict key"},
		{"dict key", "}}K\x01s.", ErrInvalid, 5, "a dict as a dict key"},
		{"set element a set", "\x8f(\x8f\x90.", ErrInvalid, 4, "a set as a dict key or set element"},
		{"tuple key", "})K\x01s.", ErrUnsupported, 5, "a tuple as a dict key"},
		{"frozenset key", "}(\x91K\x01s.", ErrUnsupported, 6, "a frozenset as a dict key"},
		{"big int key", "}\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01K\x01s.", ErrUnsupported, 15, "a int as a dict key"},
		{"a list in itself", "]\x94h\x00a.", ErrUnsupported, 5, "a list that contains itself"},
		{"DUP into itself", "]2a.", ErrUnsupported, 3, "a list that contains itself"},
		{"a dict in itself", "}\x94K\x01h\x00s.", ErrUnsupported, 7, "a dict that contains itself"},
		{"changed after placed", "]\x94]h\x00a0h\x00K\x01a.", ErrUnsupported, 12, "a list changed after it was placed"},
		{"a cycle through a tuple", "]\x94h\x00\x85a.", ErrUnsupported, 6, "a list changed after it was placed"},
		{"nested too deep", deep, ErrDepth, 2002, "nested more than 1000 deep"},
		{"LONG of 4301 digits", "\x80\x02]q\x00(K\x01L" + strings.Repeat("1", 4400) + "L\ne.", ErrDigits, 9 + 4301,
			"the integer at byte 9 has more than 4300 digits (Python refuses to read such a pickle too)"},
		{"INT of 4301 digits unterminated", "I-" + strings.Repeat("9", 5000), ErrDigits, 4302, "the integer at byte 1 has more than 4300"},
		{"INT not decimal", "Iabc\n.", ErrInvalid, 5, `"abc" is not a decimal integer`},
		{"INT in hex", "I0x10\n.", ErrUnsupported, 6, "is not a decimal integer"},
		{"INT with leading zeros", "I010\n.", ErrUnsupported, 5, "leading zeros"},
		{"INT empty", "I\n.", ErrInvalid, 2, "is not a decimal integer"},
		{"INT cut short", "I12", ErrTruncated, 3, "the input ends inside INT's line at byte 1"},
		{"FLOAT not a float", "Fxyz\n.", ErrInvalid, 5, "is not a float"},
		{"FLOAT in hex", "F0x1p-2\n.", ErrUnsupported, 8, "is not a float"},
		{"non-ASCII Python 2 string", "U\x01\xff.", ErrUnsupported, 3, "not ASCII"},
	}
	for _, tc := range tests {
		v, n, err := Decode([]byte(tc.data), nil)
		var pe *Error
		if !errors.Is(err, tc.err) || !errors.As(err, &pe) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.err)
			continue
		}
		if v != nil || n != tc.offset || pe.Offset != tc.offset {
			t.Errorf("%s: value %v, consumed %d, offset %d; want nil, %d", tc.name, v, n, pe.Offset, tc.offset)
		}
		if !strings.Contains(err.Error(), tc.detail) || !strings.HasPrefix(err.Error(), tc.err.Error()+": ") {
			t.Errorf("%s: message %q, want %q after the sentinel's", tc.name, err, tc.detail)
		}
	}
}

// Options bound digits and depth as asked.
func TestDecodeOptions(t *testing.T) {
	if _, _, err := Decode([]byte("]]]aa."), &Options{MaxDepth: 2}); !errors.Is(err, ErrDepth) {
		t.Errorf("depth 3 under MaxDepth 2: %v", err)
	}
	if _, _, err := Decode([]byte("]]aa."), &Options{MaxDepth: 2}); !errors.Is(err, ErrInvalid) {
		t.Errorf("depth 2 under MaxDepth 2, then an underflow: %v", err)
	}
	if v, _, err := Decode([]byte("]]a."), &Options{MaxDepth: 2}); err != nil || depthOf(v) != 2 {
		t.Errorf("depth 2 under MaxDepth 2: %v %v", v, err)
	}
	if _, _, err := Decode([]byte("I12345\n."), &Options{MaxDigits: 4}); !errors.Is(err, ErrDigits) {
		t.Errorf("5 digits under MaxDigits 4: %v", err)
	}
	if v, _, err := Decode([]byte("L1234L\n."), &Options{MaxDigits: 4}); err != nil || v != int64(1234) {
		t.Errorf("4 digits under MaxDigits 4: %v %v", v, err)
	}
	// Deep but within the default: 1000 levels.
	ok := strings.Repeat("]", 1000) + strings.Repeat("a", 999) + "."
	if v, _, err := Decode([]byte(ok), nil); err != nil || depthOf(v) != 1000 {
		t.Errorf("1000 levels: depth %d, %v", depthOf(v), err)
	}
}

// A length the input does not hold is refused before anything is
// allocated for it, and a long decimal integer before it is converted.
func TestDecodeAllocatesWhatTheInputHolds(t *testing.T) {
	for _, data := range []string{
		"X\xff\xff\xff\xff",
		"\x8d\xff\xff\xff\xff\xff\xff\xff\x7f",
		"\x8e\xff\xff\xff\xff\xff\xff\xff\xff",
		"\x96\x00\x00\x00\x00\x01\x00\x00\x00",
		"\x8b\xff\xff\xff\x7f",
		"\x95\xff\xff\xff\xff\xff\xff\xff\xff",
		"r\xff\xff\xff\xff",
		"L" + strings.Repeat("7", 1<<20) + "\n.",
	} {
		var err error
		b := []byte(data)
		alloc := allocatedBy(func() { _, _, err = Decode(b, nil) })
		if err == nil {
			t.Errorf("%.20q: decoded", data)
		}
		if alloc > 64<<10 {
			t.Errorf("%.20q: allocated %d bytes", data, alloc)
		}
	}
}

// allocatedBy returns the bytes f allocates.
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A list Python memoizes empty and fills afterwards is one *List through
// every reference: items appended after the memo entry are seen through
// it, and so are a dict's items set after its memo entry.
func TestDecodeSharesContainers(t *testing.T) {
	// [L, L, D, D] where L = [1, 2] and D = {"k": L}, each memoized
	// before it is filled (protocol 4, as Python writes it).
	data := "\x80\x04]\x94(]\x94(K\x01K\x02eh\x01}\x94\x8c\x01k\x94h\x01sh\x02e."
	v, _, err := Decode([]byte(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	root := v.(*List)
	if len(root.Items) != 4 || root.Items[0] != root.Items[1] || root.Items[2] != root.Items[3] {
		t.Fatalf("got %s, want the list twice and the dict twice", render(v))
	}
	l := root.Items[1].(*List)
	if len(l.Items) != 2 || l.Items[1] != int64(2) {
		t.Errorf("the list through its memo reference: %s", render(l))
	}
	d := root.Items[3].(*Dict)
	if got, ok := d.Get("k"); !ok || got != l {
		t.Errorf("the dict through its memo reference: %s", render(d))
	}
	if got := render(v); got != "[#1=[i:1,i:2],#1,#2={s:6b:#1},#2]" {
		t.Errorf("render: %s", got)
	}
}

func TestDictAndSet(t *testing.T) {
	d := NewDict()
	for i := range 40 {
		if err := d.Set(int64(i), i); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Set(true, "one"); err != nil { // True == 1: keeps the key 1
		t.Fatal(err)
	}
	if err := d.Set(2.0, "two"); err != nil {
		t.Fatal(err)
	}
	if err := d.Set([]any{}, 1); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a slice key: %v", err)
	}
	if v, ok := d.Get(int64(1)); !ok || v != "one" || d.Len() != 40 {
		t.Errorf("Get(1) = %v %v, len %d", v, ok, d.Len())
	}
	if v, ok := d.Get(false); !ok || v != 0 {
		t.Errorf("Get(False) = %v %v", v, ok)
	}
	if _, ok := d.Get(map[any]any{}); ok {
		t.Error("Get of an unhashable key found something")
	}
	i := 0
	for k, v := range d.All() {
		if k != int64(i) {
			t.Errorf("key %d is %v", i, k)
		}
		if i == 2 && v != "two" {
			t.Errorf("value of 2 is %v", v)
		}
		i++
	}
	s := NewSet(false)
	for _, v := range []any{int64(1), true, 1.0, "1", Bytes("1"), None{}, math.NaN(), math.NaN()} {
		if err := s.Add(v); err != nil {
			t.Fatal(err)
		}
	}
	if s.Len() != 6 || !s.Has(1.0) || s.Has(int64(2)) || s.Has(math.NaN()) { // NaN is never equal
		t.Errorf("set %s", render(s))
	}
	if err := s.Add(&List{}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a list element: %v", err)
	}
}
