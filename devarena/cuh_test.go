package devarena

// sa_arena.cuh is what users' kernels include, and nothing else in the
// repository compiles it: the PTX is written by hand. This test compiles it
// as host C++ (g++, with __device__ defined away and atomicAdd as a GCC
// atomic), so that its static_asserts on the layout are checked and its
// sa_arena_alloc, sa_arena_high_water and sa_arena_overflowed run; then it
// replays request sequences through the header and through the Go
// allocator (the simulator's kernels, checked in turn against a model by
// FuzzAllocSequence) and compares every step. It skips where no g++ is
// installed; CI has one.

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cuhDriver reads "base size align" and then requests (or "reset") from
// stdin, and prints for each request the pointer returned, the raw counter
// and flag, and what the header's two query functions say.
const cuhDriver = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define __device__
static unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
#include "sa_arena.cuh"
int main(void) {
    unsigned long long base, size;
    unsigned int align;
    if (scanf("%llu %llu %u", &base, &size, &align) != 3) return 2;
    struct sa_arena a = {base, size, 0, 0, align};
    char op[32];
    while (scanf("%31s", op) == 1) {
        if (strcmp(op, "reset") == 0) {
            a.offset = 0;
            a.overflow = 0;
            continue;
        }
        void* p = sa_arena_alloc(&a, strtoull(op, NULL, 10));
        printf("%llu %llu %u %llu %d\n", (unsigned long long)p, a.offset, a.overflow,
               sa_arena_high_water(&a), sa_arena_overflowed(&a) ? 1 : 0);
    }
    return 0;
}
`

// buildCUH compiles the driver against sa_arena.cuh and returns its path.
func buildCUH(t *testing.T) string {
	t.Helper()
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skipf("no g++ to compile sa_arena.cuh as host C++: %v", err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "driver.cpp")
	if err := os.WriteFile(src, []byte(cuhDriver), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "driver")
	out, err := exec.Command(cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror",
		"-I", wd, "-o", bin, src).CombinedOutput()
	if err != nil {
		t.Fatalf("sa_arena.cuh does not compile: %v\n%s", err, out)
	}
	return bin
}

type cuhCase struct {
	name        string
	size, align uint64
	ops         []string // decimal requests, or "reset"
}

func TestCUDAHeaderAgreesWithGo(t *testing.T) {
	bin := buildCUH(t)
	reqs := func(ns ...uint64) []string {
		var s []string
		for _, n := range ns {
			s = append(s, fmt.Sprint(n))
		}
		return s
	}
	cases := []cuhCase{
		{"fill_exactly", 64, 8, reqs(8, 8, 8, 8, 8, 8, 8, 8, 1, 0)},
		{"rounding", 1000, 16, reqs(1, 15, 16, 17, 0, 999, 1000, 24)},
		{"huge", 1000, 8, append(reqs(hugeRequests...), reqs(1001, 1000, 8)...)},
		{"huge_max_align", MaxAlign, MaxAlign, append(reqs(hugeRequests...), reqs(1, MaxAlign, 1)...)},
		{"reset", 100, 8, append(reqs(96, 8, 4), append([]string{"reset"}, reqs(100, 1)...)...)},
		{"smaller_than_align", 100, 256, reqs(1, 100, 0)},
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 20 {
		c := cuhCase{name: fmt.Sprint("random", i), size: 1 + rng.Uint64N(1<<16), align: MinAlign << rng.UintN(14)}
		for range 300 {
			switch r := rng.UintN(100); {
			case r < 3:
				c.ops = append(c.ops, "reset")
			case r < 6:
				c.ops = append(c.ops, fmt.Sprint(math.MaxUint64-rng.Uint64N(1<<17)))
			default:
				c.ops = append(c.ops, fmt.Sprint(rng.Uint64N(c.size/8+2)))
			}
		}
		cases = append(cases, c)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { compareCUH(t, bin, c) })
	}
}

// compareCUH runs c through the compiled header and the Go allocator.
func compareCUH(t *testing.T, bin string, c cuhCase) {
	const base = 1 << 20
	in := fmt.Sprintf("%d %d %d\n%s\n", base, c.size, c.align, strings.Join(c.ops, "\n"))
	cmd := exec.Command(bin)
	cmd.Stdin = strings.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("driver: %v", err)
	}
	lines := bufio.NewScanner(bytes.NewReader(out))
	h := newHostArena(t, base, c.size, uint32(c.align))
	for i, op := range c.ops {
		if op == "reset" {
			clear(h.b[OffOffset:OffAlign])
			continue
		}
		var n uint64
		fmt.Sscan(op, &n)
		p := h.alloc(t, n)
		e := decodeEpoch(h.b[OffOffset:])
		st := statsOf(e, int(c.size))
		overflowed := 0
		if st.Overflow {
			overflowed = 1
		}
		want := fmt.Sprintf("%d %d %d %d %d", p, e.offset, e.overflow, st.HighWater, overflowed)
		if !lines.Scan() {
			t.Fatalf("op %d (alloc %d): the driver printed nothing", i, n)
		}
		if got := lines.Text(); got != want {
			t.Fatalf("op %d: alloc(%d): sa_arena.cuh gives %q (pointer counter flag high-water overflowed), Go %q", i, n, got, want)
		}
	}
	if lines.Scan() {
		t.Fatalf("the driver printed more lines than requests: %q", lines.Text())
	}
}
