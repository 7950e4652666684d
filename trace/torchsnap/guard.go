// The guard: an opcode scanner between the file and the pickle decoder.
//
// The decoder turns the decimal text of the INT and LONG opcodes into a
// big.Int, and that conversion is quadratic in the number of digits: one
// LONG of five million digits takes half a minute. Python refuses to
// convert more than 4300 decimal digits to an int (sys.int_info
// .default_max_str_digits, Python 3.11 and later), and its unpickler
// therefore refuses such a LONG too. The guard refuses the same pickles
// before the decoder sees them: it follows the opcode stream as the bytes
// pass through it, knowing only how long each opcode's argument is
// (fixed, counted by a length prefix, or up to a newline), and fails the
// read at the first INT or LONG whose argument has more than maxDigits
// decimal digits. Everything else it passes on unchanged.
//
// Invariants: the guard's view of where each opcode starts is the
// decoder's (both follow the pickle format's argument lengths); after an
// opcode it does not know, or after STOP, it stops scanning and passes the
// rest through, since the decoder stops there too (with an error for an
// unknown opcode). Its error is a *trace.ParseError matching
// trace.ErrPickle, placed at the byte where the argument began.

package torchsnap

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/streamalloc/streamalloc/trace"
)

// maxDigits is the longest decimal integer argument a snapshot may hold:
// Python's own limit on converting decimal text to an int.
const maxDigits = 4300

// argument kinds of pickle opcodes.
const (
	argNone  = iota
	argFixed // n bytes
	argCount // an n-byte little-endian length, then that many bytes
	argLine  // up to and including a newline
	argLines // two lines (GLOBAL, INST)
	argDigit // a line of decimal text that becomes an integer (INT, LONG)
	argStop  // STOP: the end of the pickle
)

// opArgs gives, for every opcode of pickle protocols 0 to 5, its
// argument's kind and size (for argFixed and argCount). Opcodes missing
// here are unknown.
var opArgs = func() (t [256]struct {
	known bool
	kind  uint8
	n     uint8
}) {
	set := func(kind uint8, n uint8, ops string) {
		for i := 0; i < len(ops); i++ {
			t[ops[i]].known, t[ops[i]].kind, t[ops[i]].n = true, kind, n
		}
	}
	set(argNone, 0, "(0123NRabd}el]ost)uQ\x81\x85\x86\x87\x88\x89\x8f\x90\x91\x92\x93\x94\x97\x98")
	set(argStop, 0, ".")
	set(argDigit, 0, "IL")
	set(argLine, 0, "FSVgpP")
	set(argLines, 0, "ci")
	set(argFixed, 1, "Khq\x80\x82")
	set(argFixed, 2, "M\x83")
	set(argFixed, 4, "Jjr\x84")
	set(argFixed, 8, "G\x95")
	set(argCount, 1, "UC\x8c\x8a")
	set(argCount, 4, "TXB\x8b")
	set(argCount, 8, "\x8d\x8e\x96")
	return t
}()

// guard scans the pickle read through it; see the file comment.
type guard struct {
	r    io.Reader
	name string
	off  int64 // bytes passed on so far

	passAll bool   // STOP or an unknown opcode seen: no more scanning
	op      byte   // the opcode whose argument is being read
	skip    uint64 // argument bytes still to pass (argFixed, argCount)
	lenBuf  []byte // the length prefix read so far (argCount)
	lenN    int    // its size; 0 when not reading one
	lines   int    // newlines still to pass (argLine, argLines, argDigit)
	digits  int    // decimal digits of the current INT or LONG so far
	argAt   int64  // where the current argument began
	err     error
}

func newGuard(r io.Reader, name string) *guard { return &guard{r: r, name: name} }

func (g *guard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.r.Read(p)
	if !g.passAll {
		if i, gerr := g.scan(p[:n]); gerr != nil {
			g.err = gerr
			g.off += int64(i)
			return i, gerr
		}
	}
	g.off += int64(n)
	return n, err
}

// scan follows the opcodes in b, which starts at g.off. It returns the
// number of bytes that may be passed on and an error when the pickle is
// refused.
func (g *guard) scan(b []byte) (int, error) {
	i := 0
	for i < len(b) && !g.passAll {
		switch {
		case g.skip > 0:
			k := uint64(len(b) - i)
			if k > g.skip {
				k = g.skip
			}
			g.skip -= k
			i += int(k)
		case g.lenN > 0:
			g.lenBuf = append(g.lenBuf, b[i])
			i++
			if len(g.lenBuf) == g.lenN {
				var le [8]byte
				copy(le[:], g.lenBuf)
				g.skip = binary.LittleEndian.Uint64(le[:])
				g.lenBuf, g.lenN = g.lenBuf[:0], 0
			}
		case g.lines > 0:
			j := bytes.IndexByte(b[i:], '\n')
			end := len(b)
			if j >= 0 {
				end = i + j
			}
			if g.op == 'I' || g.op == 'L' {
				for _, c := range b[i:end] {
					if c >= '0' && c <= '9' {
						g.digits++
					}
				}
				if g.digits > maxDigits {
					return i, &trace.ParseError{File: g.name,
						Msg: fmt.Sprintf("unreadable pickle: the integer at byte %d has more than %d digits (Python refuses to read such a pickle too)", g.argAt, maxDigits),
						Err: trace.ErrPickle}
				}
			}
			if j < 0 {
				i = len(b)
				continue
			}
			i = end + 1
			g.lines--
			g.digits = 0
		default:
			g.op = b[i]
			a := opArgs[g.op]
			i++
			g.argAt = g.off + int64(i)
			switch {
			case !a.known, a.kind == argStop:
				g.passAll = true
			case a.kind == argFixed:
				g.skip = uint64(a.n)
			case a.kind == argCount:
				g.lenN = int(a.n)
			case a.kind == argLine, a.kind == argDigit:
				g.lines = 1
			case a.kind == argLines:
				g.lines = 2
			}
		}
	}
	return len(b), nil
}
