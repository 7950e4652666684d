// The RMM CSV log reader.
//
// RMM's logging_resource_adaptor writes one header line,
//
//	Thread,Time,Action,Pointer,Size,Stream
//
// and then one line per event. The reader streams: it reads one line at a
// time with bufio.Reader.ReadSlice, which returns a slice of the reader's
// own buffer, and parses it in place: a line of the shape RMM writes in
// one pass (csvfast.go), any other by splitting it into columns in a fixed
// array of sub-slices and parsing each (fields.go), which alone decides
// the errors. In steady state Next allocates
// nothing, and memory stays at one buffer of MaxLineLength bytes whatever
// the length of the log.
//
// Invariants: r.line is the number of the last line consumed (the header
// is line 1); once r.err is set it is returned forever, so a consumer that
// ignores one error cannot read past corrupt data by mistake.

package trace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Header is the first line of an RMM CSV log.
const Header = "Thread,Time,Action,Pointer,Size,Stream"

// MaxLineLength is the longest CSV line the reader accepts, newline
// included. RMM lines are under 100 bytes; the bound keeps a corrupt file
// without newlines from growing a buffer without limit.
const MaxLineLength = 64 << 10

// CSVReader reads an RMM CSV log. Create one with NewCSVReader or Open.
type CSVReader struct {
	r      *bufio.Reader
	name   string
	line   int64
	header bool  // the header has been read and checked
	err    error // sticky
	// wrapErr, if set, turns an error of the underlying reader into the
	// error to report (Open sets it to recognise gzip failures).
	wrapErr func(error) (msg string, err error)
	// verify, if set, reads the rest of the input and returns the error
	// of the layer below, if any (Open sets it for gzip; see blame).
	verify func() error
	cols   [6][]byte
}

// NewCSVReader returns a reader of the RMM CSV log in r. name is used in
// errors and reports. r is read through a buffer of MaxLineLength bytes
// (r itself, if it is a *bufio.Reader of at least that size).
func NewCSVReader(r io.Reader, name string) *CSVReader {
	return &CSVReader{r: bufio.NewReaderSize(r, MaxLineLength), name: name}
}

// Name returns the name given to NewCSVReader or Open.
func (r *CSVReader) Name() string { return r.name }

// Next returns the next event, io.EOF after the last, or a *ParseError.
// Empty lines are skipped; a line may end in "\n" or "\r\n", and the last
// line may lack its newline.
func (r *CSVReader) Next() (Event, error) {
	if r.err != nil {
		return Event{}, r.err
	}
	for {
		b, err := r.readLine()
		if err != nil {
			r.err = r.blame(err)
			return Event{}, r.err
		}
		if !r.header {
			r.header = true
			// A UTF-8 byte order mark is harmless; editors add it.
			b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
			if string(b) != Header {
				r.err = r.blame(r.errorf(ErrHeader, "wrong header %q, want %q", clip(b), Header))
				return Event{}, r.err
			}
			continue
		}
		if len(b) == 0 {
			continue
		}
		// The common shape in one pass (csvfast.go); anything else,
		// errors included, through the general parser.
		if ev, ok := parseFast(b); ok {
			ev.Line = r.line
			return ev, nil
		}
		ev, err := r.parse(b)
		if err != nil {
			r.err = r.blame(err)
			return Event{}, r.err
		}
		return ev, nil
	}
}

// maxVerify bounds what blame decompresses to look for a gzip error: past
// it, the line's own error stands.
const maxVerify = 256 << 20

// blame decides who is at fault for a line that does not parse. Flipped
// bits inside deflate data often decompress to garbage well before the
// gzip layer can tell (its checksum is at the end of the member), so in a
// compressed trace the reader first reads on through the rest of the
// stream, up to maxVerify bytes: if the gzip layer then fails, the file is
// corrupt and the error says so (ErrCompressed) at the line where the
// garbage began. This costs time only on the error path.
func (r *CSVReader) blame(err error) error {
	if r.verify == nil || err == io.EOF || errors.Is(err, ErrCompressed) || errors.Is(err, ErrRead) {
		return err
	}
	var below *ParseError
	if verr := r.verify(); verr == nil || !errors.As(verr, &below) {
		return err
	}
	msg := err.Error()
	if pe := (*ParseError)(nil); errors.As(err, &pe) {
		msg = pe.Msg
	}
	return &ParseError{File: r.name, Line: r.line, Err: below.Err,
		Msg: fmt.Sprintf("%s (this line decompressed to garbage: %s)", below.Msg, msg)}
}

// readLine returns the next line without its line ending, or io.EOF at
// the end of the input.
func (r *CSVReader) readLine() ([]byte, error) {
	b, err := r.r.ReadSlice('\n')
	r.line++
	switch {
	case err == nil:
	case errors.Is(err, bufio.ErrBufferFull):
		return nil, r.errorf(ErrLineTooLong, "line longer than %d bytes", MaxLineLength)
	case err == io.EOF:
		if len(b) == 0 {
			if !r.header {
				return nil, r.errorf(ErrHeader, "empty trace: no header, want %q", Header)
			}
			return nil, io.EOF
		}
		// A last line without a newline: parse it now, and the next
		// call sees io.EOF with nothing read.
	default:
		if r.wrapErr != nil {
			msg, werr := r.wrapErr(err)
			return nil, &ParseError{File: r.name, Line: r.line, Msg: msg, Err: werr}
		}
		return nil, &ParseError{File: r.name, Line: r.line, Msg: "read error: " + err.Error(),
			Err: errors.Join(ErrRead, err)}
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	return b, nil
}

// parse turns one data line into an event.
func (r *CSVReader) parse(b []byte) (Event, error) {
	n := 0
	start := 0
	for i, c := range b {
		if c == ',' {
			if n == len(r.cols)-1 {
				return Event{}, r.errorf(ErrColumns, "%d columns or more, want 6 (%s)", n+2, Header)
			}
			r.cols[n] = b[start:i]
			n++
			start = i + 1
		}
	}
	r.cols[n] = b[start:]
	n++
	if n != len(r.cols) {
		return Event{}, r.errorf(ErrColumns, "%d columns, want 6 (%s)", n, Header)
	}
	c := &r.cols
	ev := Event{Line: r.line}
	var ok bool
	if ev.Thread, ok = parseUint(c[0]); !ok {
		return Event{}, r.errorf(ErrThread, "thread %q is not a decimal or 0x-hex number", clip(c[0]))
	}
	var tres timeResult
	switch ev.Time, tres = parseTime(c[1]); tres {
	case timeBad:
		return Event{}, r.errorf(ErrTime, "time %q is neither HH:MM:SS.ffffff nor seconds", clip(c[1]))
	case timeRange:
		return Event{}, r.errorf(ErrTime, "time %q is beyond 2562047:47:16.854775807, the largest time a trace can hold", clip(c[1]))
	}
	switch string(c[2]) { // no allocation: the compiler compares in place
	case "allocate":
		ev.Op = Alloc
	case "allocate failure":
		ev.Op = AllocFailure
	case "free", "deallocate": // RMM's documentation also says "deallocate"
		ev.Op = Free
	default:
		return Event{}, r.errorf(ErrAction, "unknown action %q (want allocate, allocate failure or free)", clip(c[2]))
	}
	if ev.Ptr, ok = parseUint(c[3]); !ok {
		return Event{}, r.errorf(ErrPointer, "pointer %q is not a 0x-hex or decimal number", clip(c[3]))
	}
	var res sizeResult
	ev.Size, res = parseSize(c[4])
	switch res {
	case sizeNaN:
		return Event{}, r.errorf(ErrSize, "size %q is not a number", clip(c[4]))
	case sizeNegative:
		return Event{}, r.errorf(ErrNegativeSize, "size %s is negative", clip(c[4]))
	}
	if ev.Stream, ok = parseUint(c[5]); !ok {
		return Event{}, r.errorf(ErrStream, "stream %q is not a 0x-hex or decimal number", clip(c[5]))
	}
	return ev, nil
}

func (r *CSVReader) errorf(sentinel error, format string, args ...any) error {
	return &ParseError{File: r.name, Line: r.line, Msg: fmt.Sprintf(format, args...), Err: sentinel}
}

// clip shortens a column quoted in an error message, so that a corrupt
// line of 64 KiB does not become a 64 KiB message.
func clip(b []byte) string {
	const max = 60
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}
