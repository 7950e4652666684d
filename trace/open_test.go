package trace

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const smallCSV = Header + "\n" +
	"1,10:00:00.000001,allocate,0x7f0000000000,4096,0x0\n" +
	"1,10:00:00.000002,allocate,0x7f0000001000,256,0x10\n" +
	"1,10:00:00.000003,free,0x7f0000000000,4096,0x0\n"

func gz(t testing.TB, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(data)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpenDetectsByContent(t *testing.T) {
	tests := []struct {
		name       string // deliberately misleading extensions
		data       []byte
		format     Format
		compressed bool
		events     int
	}{
		{"plain.csv.gz", []byte(smallCSV), FormatCSV, false, 3},
		{"compressed.csv", gz(t, []byte(smallCSV)), FormatCSV, true, 3},
		{"two-members.txt", append(gz(t, []byte(smallCSV[:60])), gz(t, []byte(smallCSV[60:]))...), FormatCSV, true, 3},
	}
	for _, tc := range tests {
		f, err := Open(writeFile(t, tc.name, tc.data), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if f.Format() != tc.format || f.Compressed() != tc.compressed {
			t.Errorf("%s: format %s compressed %v, want %s %v", tc.name, f.Format(), f.Compressed(), tc.format, tc.compressed)
		}
		evs, err := readAll(t, f)
		if err != nil || len(evs) != tc.events {
			t.Errorf("%s: %d events, %v; want %d", tc.name, len(evs), err, tc.events)
		}
		if done, total := f.Progress(); done != total {
			t.Errorf("%s: progress %d of %d at the end", tc.name, done, total)
		}
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	}
}

func TestOpenBadGzip(t *testing.T) {
	long := []byte(Header + "\n" + strings.Repeat("1,10:00:00.000001,allocate,0x7f0000000000,4096,0x0\n", 5000))
	z := gz(t, long)
	// The first deflate block header right after the 10-byte gzip
	// header: BFINAL=1, BTYPE=11, a reserved block type.
	corrupt := bytes.Clone(z)
	corrupt[10] = 0x07
	badCRC := bytes.Clone(z)
	badCRC[len(badCRC)-6] ^= 0xff
	tests := []struct {
		name string
		data []byte
		// Open itself fails (header errors, snapshots), or the error
		// comes from Next after some events.
		atOpen bool
	}{
		{"truncated", z[:len(z)/2], false},
		{"corrupt", corrupt, true},
		{"bad checksum", badCRC, false},
		{"truncated header", z[:5], true},
		{"trailing garbage", append(bytes.Clone(z), 0x1f, 0x8b, 0, 0), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, "trace.gz", tc.data)
			f, err := Open(p, nil)
			if !tc.atOpen {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				defer f.Close()
				_, err = readAll(t, f)
			}
			if !errors.Is(err, ErrCompressed) {
				t.Fatalf("error %v, want ErrCompressed", err)
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.File != p {
				t.Fatalf("error %#v does not name %s", err, p)
			}
			if !tc.atOpen && pe.Line < 2 {
				t.Errorf("error at line %d, want the line being read", pe.Line)
			}
		})
	}
}

// Flipped bits in the middle of the deflate data are not always a deflate
// error: they may decompress to garbage first, which the CSV reader sees
// before gzip's checksum at the end. Either way the result is one
// *ParseError naming a line and blaming the gzip data, never events from
// garbage and success, and never a CSV error that hides the corruption.
func TestOpenFlippedBits(t *testing.T) {
	long := []byte(Header + "\n" + strings.Repeat("1,10:00:00.000001,allocate,0x7f0000000000,4096,0x0\n", 5000))
	z := gz(t, long)
	for _, at := range []int{len(z) / 3, len(z) / 2, len(z) - 20} {
		bad := bytes.Clone(z)
		bad[at] ^= 0x55
		r, _, err := NewReader(bytes.NewReader(bad), "flip.gz", nil)
		if err == nil {
			_, err = readAll(t, r)
		}
		var pe *ParseError
		if !errors.As(err, &pe) || pe.File != "flip.gz" || pe.Line < 2 || !errors.Is(err, ErrCompressed) {
			t.Errorf("flip at %d: error %v, want a *ParseError at a line matching ErrCompressed", at, err)
		}
	}
}

// In stored (uncompressed) deflate blocks a flipped byte always reaches
// the CSV reader as is, and only the checksum at the end catches it: the
// error must still be ErrCompressed, at the line of the damage. The same
// bad line in an intact gzip file is the line's own error.
func TestOpenCorruptStoredBlock(t *testing.T) {
	const line = "1,10:00:00.000001,allocate,0x7f0000000000,4096,0x0\n"
	plain := []byte(Header + "\n" + strings.Repeat(line, 2000))
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.NoCompression)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(plain)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	// Line 1001 (the 1000th event): its first comma becomes an 'X'.
	off := len(Header) + 1 + 999*len(line) + 1
	if plain[off] != ',' {
		t.Fatalf("fixture: byte %d is %q", off, plain[off])
	}
	data := bytes.Clone(buf.Bytes())
	pos := storedOffset(t, data, plain, off)
	data[pos] = 'X'

	// Control: the same damage in the plain text, compressed intact, is a
	// CSV error of that line.
	bent := bytes.Clone(plain)
	bent[off] = 'X'
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"corrupt gzip", data, ErrCompressed},
		{"bad line, intact gzip", gz(t, bent), ErrColumns},
	} {
		r, _, err := NewReader(bytes.NewReader(tc.data), "stored.gz", nil)
		if err != nil {
			t.Fatalf("%s: NewReader: %v", tc.name, err)
		}
		evs, err := readAll(t, r)
		if !errors.Is(err, tc.want) {
			t.Fatalf("%s: error %v, want %v", tc.name, err, tc.want)
		}
		var pe *ParseError
		if !errors.As(err, &pe) || pe.File != "stored.gz" || pe.Line != 1001 || len(evs) != 999 {
			t.Errorf("%s: error %v after %d events, want one at stored.gz:1001 after 999", tc.name, err, len(evs))
		}
	}
}

// storedOffset returns where byte off of plain lies in data, a gzip file
// of plain made of stored deflate blocks: each block is a 5-byte header
// (BFINAL/BTYPE byte, LEN, NLEN) followed by LEN bytes of plain text.
func storedOffset(t *testing.T, data, plain []byte, off int) int {
	t.Helper()
	pos, done := 10, 0 // after the gzip header (no optional fields)
	for pos+5 <= len(data) {
		n := int(data[pos+1]) | int(data[pos+2])<<8
		pos += 5
		if off < done+n {
			if !bytes.Equal(data[pos:pos+n], plain[done:done+n]) {
				t.Fatal("fixture: not a stored block")
			}
			return pos + off - done
		}
		pos += n
		done += n
	}
	t.Fatal("fixture: offset past the stored data")
	return 0
}

func TestOpenMissingFile(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "nope.csv"), nil)
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("error %v, want os.ErrNotExist", err)
	}
}

type failingReader struct {
	data []byte
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

// An I/O error is ErrRead, also below gzip.
func TestReadError(t *testing.T) {
	boom := errors.New("disk on fire")
	for _, data := range [][]byte{[]byte(smallCSV), gz(t, []byte(strings.Repeat(smallCSV, 1000)))[:100]} {
		r, _, err := NewReader(&failingReader{data: data, err: boom}, "x", nil)
		if err == nil {
			_, err = readAll(t, r)
		}
		if !errors.Is(err, ErrRead) || !errors.Is(err, boom) {
			t.Errorf("error %v, want ErrRead and the cause", err)
		}
	}
}

func TestNotATrace(t *testing.T) {
	for _, data := range []string{"hello world\n", "\x00\x01\x02", "{\"json\": true}"} {
		r, format, err := NewReader(strings.NewReader(data), "x", nil)
		if err != nil || format != FormatCSV {
			t.Fatalf("%q: %v %s", data, err, format)
		}
		if _, err := r.Next(); !errors.Is(err, ErrHeader) {
			t.Errorf("%q: %v, want ErrHeader", data, err)
		}
	}
}

// Reading a large gzip log keeps memory flat: the reader never holds more
// than its line buffer (checked indirectly: 200k events stream through
// without allocating per event).
func TestLargeGzipStreams(t *testing.T) {
	n := 200_000
	if testing.Short() {
		n = 20_000
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	w := NewCSVWriter(zw)
	for i := range n {
		w.Write(Event{Op: Alloc, Ptr: uint64(i) << 8, Size: 256})
	}
	w.Flush()
	zw.Close()
	r, _, err := NewReader(&buf, "big", nil)
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	allocs := testing.AllocsPerRun(1, func() {
		for {
			_, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			count++
		}
	})
	if count != n {
		t.Fatalf("read %d events, want %d", count, n)
	}
	// gzip refills its window now and then; per event it must be zero.
	if allocs > float64(n)/1000 {
		t.Errorf("%v allocations for %d events", allocs, n)
	}
}

// This test binary does not link trace/torchsnap: a pickle, plain or
// compressed, is refused with ErrFormat, naming the package that reads it,
// not read as CSV and refused for its header.
func TestOpenUnlinkedFormat(t *testing.T) {
	pkl := []byte{0x80, 2, '}', 'q', 0, '.'} // protocol 2: an empty dict
	want := "snap: a torch-snapshot trace, which this program cannot read: its reader is package github.com/streamalloc/streamalloc/trace/torchsnap, which the program does not import"
	for _, data := range [][]byte{pkl, gz(t, pkl)} {
		r, format, err := NewReader(bytes.NewReader(data), "snap", nil)
		var pe *ParseError
		if !errors.Is(err, ErrFormat) || !errors.As(err, &pe) || pe.File != "snap" || err.Error() != want || r != nil || format != "" {
			t.Errorf("%q: %v, %q, %v; want the error %q", data, r, format, err, want)
		}
	}
}

// A registered reader gets the content from its first byte, below any
// gzip layer, and default options; Open reports its format; its errors
// come back as they are.
func TestRegisterReader(t *testing.T) {
	defer RegisterReader(FormatSnapshot, nil)
	data := []byte("\x80 not really a pickle")
	var got []byte
	RegisterReader(FormatSnapshot, func(r io.Reader, name string, o *Options) (Reader, error) {
		var err error
		if got, err = io.ReadAll(r); err != nil || o == nil {
			t.Errorf("reader got %v, options %v", err, o)
		}
		return NewCSVReader(strings.NewReader(smallCSV), name), nil
	})
	for _, compressed := range []bool{false, true} {
		in := data
		if compressed {
			in = gz(t, data)
		}
		f, err := Open(writeFile(t, "x.csv", in), nil)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := readAll(t, f)
		f.Close()
		if f.Format() != FormatSnapshot || f.Compressed() != compressed || !bytes.Equal(got, data) || len(evs) != 3 || err != nil {
			t.Errorf("compressed %v: format %s compressed %v, reader got %q, %d events, %v", compressed, f.Format(), f.Compressed(), got, len(evs), err)
		}
	}
	bad := &ParseError{File: "x", Msg: "no", Err: ErrSnapshot}
	RegisterReader(FormatSnapshot, func(io.Reader, string, *Options) (Reader, error) { return nil, bad })
	if _, _, err := NewReader(bytes.NewReader(data), "x", nil); err != bad {
		t.Errorf("error %v, want the reader's %v", err, bad)
	}
}
