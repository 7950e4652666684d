// Opening traces: format detection and decompression.
//
// The format is decided by content alone. The first two bytes 1f 8b mean
// gzip (RFC 1952), and the stream is decompressed (all members, as zcat
// does) before the inner format is detected. An inner first byte 0x80 is
// the PROTO opcode that starts every pickle of protocol 2 or later, which
// is what both Python 3's pickle.dump and libtorch's C++ pickler write;
// such a file is read as a PyTorch memory snapshot, by the reader that
// package trace/torchsnap registers (register.go). Anything else is read
// as an RMM CSV log, whose reader insists on the exact header, so a file
// of any other kind fails on line 1 with ErrHeader.
//
// Errors of the gzip layer are told apart from errors of the file below
// it by watching the file's reads (countingReader): if the file read
// failed, the error is ErrRead; otherwise the gzip data is corrupt or
// truncated, ErrCompressed. Damaged deflate data can also decompress to
// garbage that the CSV reader rejects before gzip's checksum is reached;
// a compressed CSV reader therefore reads on to the end of the stream
// before it reports a bad line, and blames the gzip data if that fails
// (CSVReader.blame).

package trace

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
)

// Format names a trace format.
type Format string

// The formats Open recognises.
const (
	// FormatCSV is the RMM CSV log, read by this package.
	FormatCSV Format = "rmm-csv"
	// FormatSnapshot is a PyTorch memory snapshot, read by package
	// trace/torchsnap once a program imports it.
	FormatSnapshot Format = "torch-snapshot"
)

// Options tune how a trace is read. The zero value and nil are the
// defaults.
type Options struct {
	// Devices selects which devices' traces of a PyTorch snapshot are
	// read; nil reads all of them, merged in time order. Ignored for
	// CSV logs, which do not record the device.
	Devices []int
	// MaxExpansion bounds what a PyTorch snapshot may expand to. A pickle
	// can name one list or dictionary again and again at two bytes a
	// reference, so a file of a few megabytes can describe a billion
	// trace entries. The snapshot reader visits at most MaxExpansion trace
	// entries and segment blocks per KiB of pickle, counting an object
	// each time it is referenced, and at least MinExpansionBudget whatever
	// the size; beyond that it refuses the snapshot with ErrExpansion. An
	// entry that maps to an event takes at least 10 bytes written out, and
	// PyTorch's take a hundred or more with their stack frames, so the
	// default (DefaultMaxExpansion, one per 4 bytes) refuses only
	// snapshots that repeat themselves. 0 or less means the default.
	// Ignored for CSV logs.
	MaxExpansion int
}

// DefaultMaxExpansion is MaxExpansion's default, in trace entries and
// segment blocks per KiB of pickle.
const DefaultMaxExpansion = 256

// MinExpansionBudget is the number of trace entries and segment blocks
// that a snapshot may hold whatever its size.
const MinExpansionBudget = 1 << 16

// Progresser is implemented by readers that know how far through their
// input they are: done out of total units (bytes of the file, or events).
// Total is 0 when unknown.
type Progresser interface {
	Progress() (done, total int64)
}

// File is a trace opened by Open. It is a Reader and a Progresser; Close
// it when done.
type File struct {
	Reader
	f          *os.File
	name       string
	opts       Options
	counter    *countingReader
	size       int64
	format     Format
	compressed bool
	// spool holds every byte read so far from a file that cannot seek
	// (a pipe), so that Rewind can read it again; nil for regular files
	// and once the reader holds the whole trace (rewind.go).
	spool   *os.File
	drained bool // the spool holds the whole input
}

// Open opens the trace file name, detects its format and compression
// from its content (never from its name), and returns a reader of its
// events. o may be nil. Errors about the content are *ParseError.
func Open(name string, o *Options) (*File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("trace: %w", err)
	}
	tf := &File{f: f, name: name, size: st.Size()}
	if o != nil {
		tf.opts = *o
	}
	var src io.Reader = f
	if !st.Mode().IsRegular() {
		if src, err = tf.startSpool(); err != nil {
			f.Close()
			return nil, fmt.Errorf("trace: %s: %w", name, err)
		}
	}
	tf.counter = &countingReader{r: src}
	tf.Reader, tf.format, tf.compressed, err = newReader(tf.counter, name, &tf.opts)
	if err != nil {
		tf.Close()
		return nil, err
	}
	if _, ok := tf.Reader.(Rewinder); ok {
		tf.dropSpool() // the reader holds the whole trace
	}
	return tf, nil
}

// Format is the detected format.
func (f *File) Format() Format { return f.format }

// Compressed reports whether the file is gzip-compressed.
func (f *File) Compressed() bool { return f.compressed }

// Progress reports bytes of the file read so far out of its size; for a
// snapshot, which is read whole by Open, events returned out of events.
func (f *File) Progress() (done, total int64) {
	if p, ok := f.Reader.(Progresser); ok {
		return p.Progress()
	}
	return f.counter.n, f.size
}

// Close closes the file (and drops the copy of a piped input).
func (f *File) Close() error {
	f.dropSpool()
	return f.f.Close()
}

// NewReader detects the format of the trace in r as Open does and returns
// a reader of its events and the format. name is used in errors and
// reports; o may be nil.
func NewReader(r io.Reader, name string, o *Options) (Reader, Format, error) {
	rd, format, _, err := newReader(&countingReader{r: r}, name, o)
	return rd, format, err
}

func newReader(src *countingReader, name string, o *Options) (Reader, Format, bool, error) {
	if o == nil {
		o = &Options{}
	}
	br := bufio.NewReaderSize(src, MaxLineLength)
	compressed := false
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		compressed = true
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, "", true, classify(src, name, 0, err, "gzip header")
		}
		br = bufio.NewReaderSize(&decompressed{gz: gz, src: src, name: name}, MaxLineLength)
	}
	first, err := br.Peek(1)
	if err != nil && err != io.EOF {
		var pe *ParseError
		if errors.As(err, &pe) {
			return nil, "", compressed, pe
		}
		return nil, "", compressed, classify(src, name, 0, err, "reading")
	}
	if len(first) == 1 {
		if i := detect(br.Peek); i >= 0 {
			rd, err := readDetected(i, br, name, o)
			if err != nil {
				return nil, "", compressed, err
			}
			return rd, detected[i].format, compressed, nil
		}
	}
	cr := NewCSVReader(br, name)
	if compressed {
		// cr reads through br itself (NewCSVReader keeps a large
		// enough *bufio.Reader), so this reads on from where it stopped.
		cr.verify = func() error {
			if _, err := io.CopyN(io.Discard, br, maxVerify); err != io.EOF {
				return err
			}
			return nil
		}
	}
	cr.wrapErr = func(err error) (string, error) {
		var pe *ParseError
		if errors.As(err, &pe) {
			return pe.Msg, pe.Err
		}
		return "read error: " + err.Error(), errors.Join(ErrRead, err)
	}
	return cr, FormatCSV, compressed, nil
}

// decompressed is the gzip stream, with its errors already classified as
// *ParseError (without a line: the reader above adds it).
type decompressed struct {
	gz   *gzip.Reader
	src  *countingReader
	name string
}

func (d *decompressed) Read(p []byte) (int, error) {
	n, err := d.gz.Read(p)
	if err != nil && err != io.EOF {
		err = classify(d.src, d.name, 0, err, "decompressing")
	}
	return n, err
}

// classify turns an error met while reading through gzip into a
// *ParseError: ErrRead if the file below failed, else ErrCompressed.
func classify(src *countingReader, name string, line int64, err error, what string) *ParseError {
	if src.err != nil {
		return &ParseError{File: name, Line: line, Msg: "read error: " + src.err.Error(),
			Err: errors.Join(ErrRead, src.err)}
	}
	return &ParseError{File: name, Line: line,
		Msg: fmt.Sprintf("corrupt or truncated gzip data (%s): %v", what, err),
		Err: errors.Join(ErrCompressed, err)}
}

// countingReader counts the bytes read from r and remembers its first
// error other than io.EOF.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && err != io.EOF && c.err == nil {
		c.err = err
	}
	return n, err
}
