package devarena

// Checks that the three descriptions of the header agree (layout.go,
// sa_arena.cuh, sa_arena.ptx), and a lint of the hand-written PTX for the
// mistakes no assembler checks here: registers past their declared count,
// branches to labels that do not exist, unbalanced braces.

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestHeaderAgreesWithCUDA(t *testing.T) {
	src, err := os.ReadFile("sa_arena.cuh")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"base": OffBase, "size": OffSize, "offset": OffOffset, "overflow": OffOverflow, "align": OffAlign}
	re := regexp.MustCompile(`offsetof\(struct sa_arena, (\w+)\) == (\d+)`)
	found := 0
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		off, _ := strconv.Atoi(m[2])
		w, ok := want[m[1]]
		if !ok || w != off {
			t.Errorf("sa_arena.cuh: %s at %d; layout.go says %d (known %v)", m[1], off, w, ok)
		}
		found++
	}
	if found != len(want) {
		t.Errorf("sa_arena.cuh asserts %d offsets, want %d", found, len(want))
	}
	if !strings.Contains(string(src), "sizeof(struct sa_arena) == "+strconv.Itoa(HeaderSize)) {
		t.Errorf("sa_arena.cuh does not assert sizeof == %d", HeaderSize)
	}
}

func TestPTXAccessesHeaderFields(t *testing.T) {
	for _, entry := range []string{TagEntry, BumpEntry} {
		body := ptxFunction(t, entry)
		for _, want := range []string{
			"ld.global.u64 %rd5, [%rd1+" + strconv.Itoa(OffBase) + "]",
			"ld.global.u64 %rd6, [%rd1+" + strconv.Itoa(OffSize) + "]",
			"ld.global.u32 %r2, [%rd1+" + strconv.Itoa(OffAlign) + "]",
			"ld.volatile.global.u64 %rd16, [%rd1+" + strconv.Itoa(OffOffset) + "]",
			"atom.global.add.u64 %rd17, [%rd1+" + strconv.Itoa(OffOffset) + "], %rd14",
			"st.volatile.global.u32 [%rd1+" + strconv.Itoa(OffOverflow) + "], %r9",
		} {
			// [%rd1+0] is written [%rd1].
			want = strings.ReplaceAll(want, "+0]", "]")
			if !strings.Contains(body, want) {
				t.Errorf("%s: no %q", entry, want)
			}
		}
	}
}

// ptxFunction returns the body of entry in PTX, braces included.
func ptxFunction(t *testing.T, entry string) string {
	t.Helper()
	i := strings.Index(PTX, ".entry "+entry+"(")
	if i < 0 {
		t.Fatalf("no entry %s", entry)
	}
	open := strings.Index(PTX[i:], "{")
	if open < 0 {
		t.Fatalf("%s has no body", entry)
	}
	depth := 0
	for j := i + open; j < len(PTX); j++ {
		switch PTX[j] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return PTX[i+open : j+1]
			}
		}
	}
	t.Fatalf("%s: unbalanced braces", entry)
	return ""
}

func TestPTXLint(t *testing.T) {
	comments := regexp.MustCompile(`//[^\n]*`)
	decl := regexp.MustCompile(`\.reg\s+\.\w+\s+%(\w+?)<(\d+)>;`)
	use := regexp.MustCompile(`%([a-z]+)(\d+)\b`)
	label := regexp.MustCompile(`(?m)^([A-Z_][A-Z0-9_]*):`)
	branch := regexp.MustCompile(`\bbra(?:\.uni)?\s+([A-Z_][A-Z0-9_]*);`)
	for _, entry := range []string{TagEntry, BumpEntry} {
		body := comments.ReplaceAllString(ptxFunction(t, entry), "")
		limits := map[string]int{}
		for _, m := range decl.FindAllStringSubmatch(body, -1) {
			limits[m[1]], _ = strconv.Atoi(m[2])
		}
		if len(limits) == 0 {
			t.Fatalf("%s declares no registers", entry)
		}
		for _, m := range use.FindAllStringSubmatch(body, -1) {
			n, _ := strconv.Atoi(m[2])
			lim, ok := limits[m[1]]
			if !ok || n >= lim {
				t.Errorf("%s: register %%%s%s outside its declaration %%%s<%d>", entry, m[1], m[2], m[1], lim)
			}
		}
		labels := map[string]bool{}
		for _, m := range label.FindAllStringSubmatch(body, -1) {
			if labels[m[1]] {
				t.Errorf("%s: label %s defined twice", entry, m[1])
			}
			labels[m[1]] = true
		}
		branches := branch.FindAllStringSubmatch(body, -1)
		if len(branches) == 0 {
			t.Fatalf("%s: no branches found", entry)
		}
		for _, m := range branches {
			if !labels[m[1]] {
				t.Errorf("%s: branch to undefined label %s", entry, m[1])
			}
		}
		// Every instruction line ends with a semicolon.
		for _, line := range strings.Split(body, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || line == "{" || line == "}" || strings.HasSuffix(line, ":") {
				continue
			}
			if !strings.HasSuffix(line, ";") {
				t.Errorf("%s: line without a semicolon: %q", entry, line)
			}
		}
	}
}
