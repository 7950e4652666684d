// Command coldlines reads the memory trace of valgrind's lackey
// (--trace-mem=yes) of capi/testdata/cold_lines.c and tells, for each kind
// of call that program marks, how many distinct cache lines (64 bytes) and
// pages (4 KiB) one call touches, of data and of code, and who touches
// them: the function and the source line of the instruction that first
// touches each data line, and the region the line lies in (the library's
// globals by ELF section, the Go heap, the host). A call whose caches the
// host's work has evicted misses on each of its distinct lines, so their
// number, not the instructions, is a cold call's cost; unlike a timing it
// needs no quiet machine, and runs of the same binaries agree to a line or
// two (where the heap places objects).
//
// "coldlines seq TRACE OUT" converts a recorded allocation trace into the
// flat call sequence cold_lines.c replays ("cold_lines INFO -seq OUT"),
// so that the calls counted are a real program's (seq.go).
//
// scripts/cold-lines.sh builds the library and the program and runs it;
// by hand:
//
//	valgrind --tool=lackey --trace-mem=yes --log-file=/dev/stdout \
//	    ./cold_lines INFO 1000 | go run ./scripts/coldlines -exe ./cold_lines \
//	    -lib ./libstreamalloc.so -info INFO
//
// Windows: the program stores to cl_mark[k] (k >= 1, the kind) before a
// call and to cl_mark[0] after it. Valgrind runs one thread at a time, so
// a window can hold another thread's accesses: a window with an
// instruction of the Go runtime's background work (its monitor, the
// garbage collector's workers, the scheduler's search for work) is
// counted apart and left out of the figures, which are medians and means
// over the remaining windows of a kind.
package main

import (
	"bufio"
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// kindNames are cold_lines.c's kinds, by mark; the program's INFO file
// names the others (a replayed sequence's, infoKinds).
var kindNames = map[int]string{
	1: "alloc, ring, legacy stream",
	2: "free, ring, legacy stream",
	3: "alloc, ring, created stream",
	4: "free, ring, created stream",
	5: "alloc, 1 MiB pair, legacy stream",
	6: "free, 1 MiB pair, legacy stream",
	7: "empty crossing (sa_last_error)",
}

// background names functions that the calling thread never runs during a
// call: one seen in a window means another thread ran in it.
var background = []string{
	"runtime.sysmon", "runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge",
	"runtime.forcegchelper", "runtime.runfinq", "runtime.findRunnable", "runtime.schedule",
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "seq" {
		if len(os.Args) != 4 {
			fmt.Fprintln(os.Stderr, "usage: coldlines seq TRACE OUT")
			os.Exit(2)
		}
		if err := convertSeq(os.Args[2], os.Args[3]); err != nil {
			fmt.Fprintln(os.Stderr, "coldlines:", err)
			os.Exit(1)
		}
		return
	}
	exe := flag.String("exe", "", "the marking program (non-PIE), for cl_mark's address")
	lib := flag.String("lib", "", "libstreamalloc.so, not stripped (symbols and DWARF)")
	info := flag.String("info", "", "the program's INFO file: the library's load address")
	top := flag.Int("top", 12, "functions and source lines listed per kind")
	detail := flag.Int("detail", 0, "also list every data line of the median window of this kind")
	flag.Parse()
	if *exe == "" || *lib == "" || *info == "" {
		fmt.Fprintln(os.Stderr, "usage: coldlines -exe PROG -lib LIB -info INFO < lackey-trace")
		os.Exit(2)
	}
	if err := run(os.Stdin, os.Stdout, *exe, *lib, *info, *top, *detail); err != nil {
		fmt.Fprintln(os.Stderr, "coldlines:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer, exe, lib, info string, top, detail int) error {
	mark, exeLo, exeHi, err := markAddr(exe)
	if err != nil {
		return err
	}
	an := &analyzer{mark: mark, exeLo: exeLo, exeHi: exeHi, libPath: lib, infoPath: info,
		kinds: map[int]*kindStats{}, detail: detail}
	if err := an.read(in); err != nil {
		return err
	}
	if an.sym == nil {
		return errors.New("no marked window in the trace")
	}
	an.report(out, top)
	return nil
}

// markAddr returns cl_mark's address and the executable's mapped range.
func markAddr(path string) (mark, lo, hi uint64, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC {
		return 0, 0, 0, fmt.Errorf("%s: not a non-PIE executable (build with -no-pie)", path)
	}
	syms, err := f.Symbols()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	for _, s := range syms {
		if s.Name == "cl_mark" {
			mark = s.Value
		}
	}
	if mark == 0 {
		return 0, 0, 0, fmt.Errorf("%s: no symbol cl_mark", path)
	}
	lo = ^uint64(0)
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			lo, hi = min(lo, p.Vaddr), max(hi, p.Vaddr+p.Memsz)
		}
	}
	return mark, lo, hi, nil
}

// site is what touched a line: a function and a source line of the
// library, or the host.
type site struct {
	fn   string
	file string
	line int
}

// window is one call's accesses.
type window struct {
	kind       int
	dlines     map[uint64]int // data line -> site index of the first toucher
	dpages     map[uint64]bool
	ilines     map[uint64]int // code line -> site index
	ipages     map[uint64]bool
	background bool
}

type kindStats struct {
	windows, dropped int
	dl, dp, il, ip   []int
	// Per site and per category and region: lines first touched, summed
	// over the kept windows.
	bySite   map[int]int
	byCat    map[string]int
	byRegion map[string]int
	codeCat  map[string]int
	kept     []*window // for the detail listing (only of the detail kind)
}

type analyzer struct {
	mark, exeLo, exeHi uint64
	libPath, infoPath  string
	sym                *symbolizer
	kinds              map[int]*kindStats
	cur                *window
	lastSite           int
	siteOf             map[uint64]int // code address -> site index
	detail             int
	names              map[int]string // kinds' names, kindNames and the INFO file's (read with sym)
}

// markKinds is how many cache lines cl_mark spans: kinds 1 to markKinds-1.
const markKinds = 16

var (
	errKindLine = errors.New(`bad kind line (want "kind K NAME", 1 <= K < 16)`)
	errKindDup  = errors.New("kind named twice")
)

// infoKinds returns kindNames with the kinds the INFO file names added,
// from its lines "kind K NAME" (cold_lines.c writes them for a replayed
// sequence's calls); other lines are not its business.
func infoKinds(b []byte) (map[int]string, error) {
	names := maps.Clone(kindNames)
	seen := map[int]bool{}
	for i, ln := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(ln, "kind ")
		if !ok {
			continue
		}
		ks, name, _ := strings.Cut(rest, " ")
		k, err := strconv.Atoi(ks)
		name = strings.TrimSpace(name)
		if err != nil || k < 1 || k >= markKinds || name == "" {
			return nil, fmt.Errorf("line %d: %q: %w", i+1, ln, errKindLine)
		}
		if seen[k] {
			return nil, fmt.Errorf("line %d: kind %d: %w", i+1, k, errKindDup)
		}
		seen[k] = true
		names[k] = name
	}
	return names, nil
}

func (a *analyzer) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		b := sc.Bytes()
		if len(b) < 4 || b[0] == '=' {
			continue
		}
		op := b[1]
		if b[0] == 'I' {
			op = 'I'
		} else if b[0] != ' ' {
			continue
		}
		if a.cur == nil && op != 'S' && op != 'M' {
			continue // outside a window only a mark's store matters
		}
		addr, size, ok := parseAccess(b[3:])
		if !ok {
			continue
		}
		if (op == 'S' || op == 'M') && addr >= a.mark && addr < a.mark+markKinds*64 {
			if err := a.marked(int((addr - a.mark) / 64)); err != nil {
				return err
			}
			continue
		}
		if a.cur == nil {
			continue
		}
		if op == 'I' {
			a.instr(addr, size)
		} else {
			a.data(addr, size)
		}
	}
	return sc.Err()
}

// maxAccess is the most bytes parseAccess accepts of one access: more than
// any instruction's (XSAVE's area is a few KiB), so that a corrupt line
// cannot make a window walk a range of lines without end.
const maxAccess = 1 << 16

// parseAccess parses the "addr,size" of a lackey line after its operation
// column: hex address, decimal size; ok is false for anything else, a
// size of 0 or above maxAccess, or an access past the address space's end.
func parseAccess(b []byte) (addr, size uint64, ok bool) {
	i := 0
	for i < len(b) && b[i] == ' ' {
		i++
	}
	j := i
	for j < len(b) && b[j] != ',' {
		j++
	}
	if j == i || j >= len(b) {
		return 0, 0, false
	}
	addr, err := strconv.ParseUint(string(b[i:j]), 16, 64)
	if err != nil {
		return 0, 0, false
	}
	size, err = strconv.ParseUint(strings.TrimSpace(string(b[j+1:])), 10, 64)
	if err != nil || size == 0 || size > maxAccess || addr+size-1 < addr {
		return 0, 0, false
	}
	return addr, size, true
}

func (a *analyzer) marked(k int) error {
	if a.sym == nil {
		// The program writes INFO before its first mark.
		s, err := newSymbolizer(a.libPath, a.infoPath)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(a.infoPath)
		if err != nil {
			return err
		}
		if a.names, err = infoKinds(b); err != nil {
			return fmt.Errorf("%s: %w", a.infoPath, err)
		}
		a.sym, a.siteOf = s, map[uint64]int{}
	}
	if a.cur != nil {
		a.close()
	}
	if k == 0 {
		return nil
	}
	a.cur = &window{kind: k, dlines: map[uint64]int{}, dpages: map[uint64]bool{},
		ilines: map[uint64]int{}, ipages: map[uint64]bool{}}
	a.lastSite = -1
	return nil
}

func (a *analyzer) instr(addr, size uint64) {
	i, ok := a.siteOf[addr]
	if !ok {
		i = a.sym.site(addr, a.exeLo <= addr && addr < a.exeHi)
		a.siteOf[addr] = i
	}
	a.lastSite = i
	if a.sym.background[i] {
		a.cur.background = true
	}
	for l := addr >> 6; l <= (addr+size-1)>>6; l++ {
		if _, ok := a.cur.ilines[l]; !ok {
			a.cur.ilines[l] = i
		}
	}
	a.cur.ipages[addr>>12] = true
}

func (a *analyzer) data(addr, size uint64) {
	for l := addr >> 6; l <= (addr+size-1)>>6; l++ {
		if _, ok := a.cur.dlines[l]; !ok {
			a.cur.dlines[l] = a.lastSite
		}
	}
	a.cur.dpages[addr>>12] = true
}

func (a *analyzer) close() {
	w := a.cur
	a.cur = nil
	ks := a.kinds[w.kind]
	if ks == nil {
		ks = &kindStats{bySite: map[int]int{}, byCat: map[string]int{}, byRegion: map[string]int{}, codeCat: map[string]int{}}
		a.kinds[w.kind] = ks
	}
	ks.windows++
	if w.background {
		ks.dropped++
		return
	}
	ks.dl = append(ks.dl, len(w.dlines))
	ks.dp = append(ks.dp, len(w.dpages))
	ks.il = append(ks.il, len(w.ilines))
	ks.ip = append(ks.ip, len(w.ipages))
	for l, s := range w.dlines {
		ks.bySite[s]++
		ks.byCat[a.sym.category(s)]++
		ks.byRegion[a.region(l<<6)]++
	}
	for _, s := range w.ilines {
		ks.codeCat[a.sym.category(s)]++
	}
	if w.kind == a.detail {
		ks.kept = append(ks.kept, w)
	}
}

// region names where a data address lies.
func (a *analyzer) region(addr uint64) string {
	if a.exeLo <= addr && addr < a.exeHi {
		return "host program"
	}
	if sec := a.sym.section(addr); sec != "" {
		return "library " + sec
	}
	if d := int64(addr - a.sym.stack); -8<<20 < d && d < 1<<20 {
		return "the calling C thread's stack"
	}
	return "Go heap, goroutine stacks, other mappings"
}

func (a *analyzer) report(out io.Writer, top int) {
	ks := slices.Sorted(func(yield func(int) bool) {
		for k := range a.kinds {
			if !yield(k) {
				return
			}
		}
	})
	fmt.Fprintf(out, "%-34s %7s %7s | %13s %13s | %13s %13s\n", "kind", "calls", "dropped",
		"data lines", "data pages", "code lines", "code pages")
	fmt.Fprintf(out, "%-34s %7s %7s | %13s %13s | %13s %13s\n", "", "", "", "median mean", "median mean", "median mean", "median mean")
	for _, k := range ks {
		s := a.kinds[k]
		fmt.Fprintf(out, "%-34s %7d %7d | %s %s | %s %s\n", a.names[k], s.windows, s.dropped,
			medmean(s.dl), medmean(s.dp), medmean(s.il), medmean(s.ip))
	}
	for _, k := range ks {
		s := a.kinds[k]
		n := float64(len(s.dl))
		if n == 0 {
			continue
		}
		fmt.Fprintf(out, "\n== %s: per call, mean\n", a.names[k])
		fmt.Fprintf(out, "data lines by who first touches them:")
		for _, c := range sortedKeys(s.byCat) {
			fmt.Fprintf(out, " %s %.1f;", c, float64(s.byCat[c])/n)
		}
		fmt.Fprintf(out, "\ncode lines by whose code:")
		for _, c := range sortedKeys(s.codeCat) {
			fmt.Fprintf(out, " %s %.1f;", c, float64(s.codeCat[c])/n)
		}
		fmt.Fprintf(out, "\ndata lines by region:")
		for _, c := range sortedKeys(s.byRegion) {
			fmt.Fprintf(out, " %s %.1f;", c, float64(s.byRegion[c])/n)
		}
		byFn := map[string]int{}
		bySrc := map[string]int{}
		for i, c := range s.bySite {
			st := site{fn: "none"}
			if i >= 0 {
				st = a.sym.sites[i]
			}
			byFn[st.fn] += c
			bySrc[fmt.Sprintf("%s:%d (%s)", st.file, st.line, shortFn(st.fn))] += c
		}
		fmt.Fprintf(out, "\ndata lines first touched, by function:\n")
		for _, f := range topKeys(byFn, top) {
			fmt.Fprintf(out, "  %6.2f  %s\n", float64(byFn[f])/n, f)
		}
		fmt.Fprintf(out, "data lines first touched, by source line:\n")
		for _, f := range topKeys(bySrc, top) {
			fmt.Fprintf(out, "  %6.2f  %s\n", float64(bySrc[f])/n, f)
		}
		if k == a.detail && len(s.kept) > 0 {
			a.listWindow(out, s.kept)
		}
	}
}

// listWindow lists each data line of the window whose count of data lines
// is the median, in the order of its address, with its first toucher.
func (a *analyzer) listWindow(out io.Writer, ws []*window) {
	ws = slices.Clone(ws)
	slices.SortStableFunc(ws, func(x, y *window) int { return cmp.Compare(len(x.dlines), len(y.dlines)) })
	w := ws[len(ws)/2]
	lines := slices.Sorted(func(yield func(uint64) bool) {
		for l := range w.dlines {
			if !yield(l) {
				return
			}
		}
	})
	fmt.Fprintf(out, "the median window's %d data lines:\n", len(lines))
	for _, l := range lines {
		st := site{fn: "none"}
		if i := w.dlines[l]; i >= 0 {
			st = a.sym.sites[i]
		}
		fmt.Fprintf(out, "  %#014x  %-30s %s:%d (%s)\n", l<<6, a.region(l<<6), st.file, st.line, shortFn(st.fn))
	}
}

func shortFn(fn string) string {
	return strings.TrimPrefix(fn, "github.com/streamalloc/streamalloc/")
}

func medmean(v []int) string {
	if len(v) == 0 {
		return fmt.Sprintf("%6s %6s", "-", "-")
	}
	s := slices.Clone(v)
	slices.Sort(s)
	sum := 0
	for _, x := range s {
		sum += x
	}
	return fmt.Sprintf("%6d %6.1f", s[len(s)/2], float64(sum)/float64(len(s)))
}

func sortedKeys(m map[string]int) []string {
	return topKeys(m, len(m))
}

func topKeys(m map[string]int, n int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys[:min(n, len(keys))]
}

// symbolizer names the library's code addresses (function and source
// line, inlined code by its own source line) and data sections.
type symbolizer struct {
	base       uint64
	stack      uint64       // an address on the calling thread's stack
	funcs      []elf.Symbol // STT_FUNC, by address
	lines      []lineEntry  // by address
	secs       []*elf.Section
	sites      []site
	siteIdx    map[site]int
	background map[int]bool
}

type lineEntry struct {
	addr uint64
	file string
	line int
}

func newSymbolizer(lib, info string) (*symbolizer, error) {
	b, err := os.ReadFile(info)
	if err != nil {
		return nil, err
	}
	var base, stack uint64
	for _, ln := range strings.Split(string(b), "\n") {
		key, v, _ := strings.Cut(ln, " ")
		var dst *uint64
		switch key {
		case "base":
			dst = &base
		case "stack":
			dst = &stack
		default:
			continue
		}
		if *dst, err = strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64); err != nil {
			return nil, fmt.Errorf("%s: %w", info, err)
		}
	}
	if base == 0 || stack == 0 {
		return nil, fmt.Errorf("%s: no base or no stack", info)
	}
	f, err := elf.Open(lib)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("%s: %w (build without -s)", lib, err)
	}
	s := &symbolizer{base: base, stack: stack, siteIdx: map[site]int{}, background: map[int]bool{}}
	for _, sy := range syms {
		if elf.ST_TYPE(sy.Info) == elf.STT_FUNC && sy.Value != 0 {
			s.funcs = append(s.funcs, sy)
		}
	}
	slices.SortFunc(s.funcs, func(x, y elf.Symbol) int { return cmp.Compare(x.Value, y.Value) })
	for _, sec := range f.Sections {
		if sec.Flags&elf.SHF_ALLOC != 0 && sec.Type != elf.SHT_NOTE {
			s.secs = append(s.secs, sec)
		}
	}
	d, err := f.DWARF()
	if err != nil {
		return nil, fmt.Errorf("%s: %w (build without -w)", lib, err)
	}
	if err := s.readLines(d); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *symbolizer) readLines(d *dwarf.Data) error {
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			return err
		}
		if e == nil {
			break
		}
		if e.Tag != dwarf.TagCompileUnit {
			r.SkipChildren()
			continue
		}
		lr, err := d.LineReader(e)
		if err != nil || lr == nil {
			r.SkipChildren()
			continue
		}
		var le dwarf.LineEntry
		for lr.Next(&le) == nil {
			if le.EndSequence || le.File == nil {
				continue
			}
			s.lines = append(s.lines, lineEntry{le.Address, le.File.Name, le.Line})
		}
		r.SkipChildren()
	}
	slices.SortStableFunc(s.lines, func(x, y lineEntry) int { return cmp.Compare(x.addr, y.addr) })
	return nil
}

// site returns the index of the site of a code address.
func (s *symbolizer) site(addr uint64, host bool) int {
	st := site{fn: "host program", file: "host", line: 0}
	if !host && addr >= s.base {
		off := addr - s.base
		i := sort.Search(len(s.funcs), func(i int) bool { return s.funcs[i].Value > off }) - 1
		if i >= 0 && off < s.funcs[i].Value+max(s.funcs[i].Size, 1) {
			st.fn = s.funcs[i].Name
			j := sort.Search(len(s.lines), func(j int) bool { return s.lines[j].addr > off }) - 1
			if j >= 0 {
				st.file, st.line = trimFile(s.lines[j].file), s.lines[j].line
			}
		} else {
			st = site{fn: "other (libc, loader)", file: "other"}
		}
	} else if !host {
		st = site{fn: "other (libc, loader)", file: "other"}
	}
	i, ok := s.siteIdx[st]
	if !ok {
		i = len(s.sites)
		s.sites = append(s.sites, st)
		s.siteIdx[st] = i
		s.background[i] = slices.Contains(background, st.fn)
	}
	return i
}

func trimFile(f string) string {
	if i := strings.Index(f, "streamalloc/streamalloc/"); i >= 0 {
		return f[i+len("streamalloc/streamalloc/"):]
	}
	if i := strings.Index(f, "/src/"); i >= 0 {
		return f[i+len("/src/"):]
	}
	return f
}

// category groups a site: the Go runtime, the cgo glue, each package of
// the library, the host.
func (s *symbolizer) category(i int) string {
	if i < 0 {
		return "none"
	}
	fn := s.sites[i].fn
	switch {
	case strings.HasPrefix(fn, "runtime/cgo") || strings.HasPrefix(fn, "_cgo") || strings.HasPrefix(fn, "crosscall") ||
		strings.HasPrefix(fn, "x_cgo") || fn == "sa_torch_alloc" || fn == "sa_torch_free" || fn == "sa_last_error":
		return "cgo glue"
	case strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "internal/") || strings.HasPrefix(fn, "sync/atomic."):
		return "Go runtime"
	case strings.HasPrefix(fn, "main."):
		return "capi"
	case strings.HasPrefix(fn, "github.com/streamalloc/streamalloc/"):
		p := strings.TrimPrefix(fn, "github.com/streamalloc/streamalloc/")
		if j := strings.IndexAny(p, ".("); j > 0 {
			p = p[:j]
		}
		return strings.TrimSuffix(p, "/")
	default:
		return fn
	}
}

// section names the library's section holding addr, or "".
func (s *symbolizer) section(addr uint64) string {
	if addr < s.base {
		return ""
	}
	off := addr - s.base
	for _, sec := range s.secs {
		if off >= sec.Addr && off < sec.Addr+sec.Size {
			return sec.Name
		}
	}
	return ""
}
