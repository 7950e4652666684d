package main

import (
	"errors"
	"fmt"
	"testing"
)

// TestParseAccess: the address and size of lackey's access lines, after
// the operation's column; what is no access of one instruction (no comma,
// not hex, a size of 0, larger than any instruction's access, or one that
// runs past the end of the address space) is refused.
func TestParseAccess(t *testing.T) {
	for _, c := range []struct {
		in         string
		addr, size uint64
		ok         bool
	}{
		{"04015a6,3", 0x4015a6, 3, true},
		{" 1ffefffe98,8", 0x1ffefffe98, 8, true},
		{"7ff0,64 ", 0x7ff0, 64, true},
		{"ffffffffffffffc0,64", 0xffffffffffffffc0, 64, true},
		{"", 0, 0, false},
		{"04015a6", 0, 0, false},
		{",8", 0, 0, false},
		{"xyz,8", 0, 0, false},
		{"10,", 0, 0, false},
		{"10,0", 0, 0, false},
		{"10,-1", 0, 0, false},
		{"ffffffffffffffff,2", 0, 0, false},
		{"0,18446744073709551615", 0, 0, false},
		{fmt.Sprintf("0,%d", maxAccess+1), 0, 0, false},
	} {
		addr, size, ok := parseAccess([]byte(c.in))
		if addr != c.addr || size != c.size || ok != c.ok {
			t.Errorf("parseAccess(%q) = %#x, %d, %v; want %#x, %d, %v", c.in, addr, size, ok, c.addr, c.size, c.ok)
		}
	}
}

// FuzzParseAccess: an access parseAccess accepts covers 1 to maxAccess
// bytes without wrapping, so the lines it spans are a short range; and a
// line written from an access it accepts parses back to that access.
func FuzzParseAccess(f *testing.F) {
	for _, s := range []string{"04015a6,3", " 1ffefffe98,8", "ffffffffffffffff,2", "0,18446744073709551615"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		addr, size, ok := parseAccess([]byte(s))
		if !ok {
			return
		}
		if size == 0 || size > maxAccess || addr+size-1 < addr {
			t.Fatalf("parseAccess(%q) accepted %#x, %d", s, addr, size)
		}
		a2, s2, ok2 := parseAccess(fmt.Appendf(nil, "%x,%d", addr, size))
		if !ok2 || a2 != addr || s2 != size {
			t.Fatalf("%#x,%d written and read back: %#x, %d, %v", addr, size, a2, s2, ok2)
		}
	})
}

// TestInfoKinds: the INFO file's "kind K NAME" lines name kinds beside
// kindNames; other lines are passed by; a kind out of cl_mark's range,
// without a name or not a number, and a kind named twice are refused.
func TestInfoKinds(t *testing.T) {
	names, err := infoKinds([]byte("base 0x7f00\nkind 8 alloc, gpt2 sequence\nkind 9  free, gpt2 sequence \nstack 0x1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if names[8] != "alloc, gpt2 sequence" || names[9] != "free, gpt2 sequence" || names[1] != kindNames[1] {
		t.Errorf("names = %v", names)
	}
	if kindNames[8] != "" {
		t.Errorf("infoKinds changed kindNames: %q", kindNames[8])
	}
	for _, c := range []struct {
		in   string
		want error
	}{
		{"kind 0 zero\n", errKindLine},
		{"kind 16 past the marks\n", errKindLine},
		{"kind -1 negative\n", errKindLine},
		{"kind x name\n", errKindLine},
		{"kind 8\n", errKindLine},
		{"kind 8 \n", errKindLine},
		{"kind 8 a\nkind 8 b\n", errKindDup},
	} {
		if _, err := infoKinds([]byte(c.in)); !errors.Is(err, c.want) {
			t.Errorf("infoKinds(%q) = %v, want %v", c.in, err, c.want)
		}
	}
}

// FuzzInfoKinds: infoKinds never panics, and what it accepts names only
// kinds cl_mark has, each with a non-empty name.
func FuzzInfoKinds(f *testing.F) {
	for _, s := range []string{"kind 8 alloc, x sequence\n", "base 0x1\nkind 15 y\n", "kind 8 a\nkind 8 b\n", "kind 99999999999999999999 z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		names, err := infoKinds([]byte(s))
		if err != nil {
			return
		}
		for k, n := range names {
			if k < 1 || k >= markKinds || n == "" {
				t.Fatalf("infoKinds(%q) named kind %d %q", s, k, n)
			}
		}
	})
}
