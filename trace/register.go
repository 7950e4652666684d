// Readers that live in packages of their own.
//
// Open tells every format it knows by its first bytes, but a reader whose
// decoder is heavy lives in a package of its own, so that a program that
// only writes RMM CSV logs (the mr logging adaptor does) links no more
// than this package: the PyTorch snapshot reader and its pickle decoder
// are package trace/torchsnap, which registers itself with RegisterReader
// when a program imports it. A file of a format whose reader the program
// does not link is refused with ErrFormat, naming the package to import,
// rather than read as CSV and refused for its header.
//
// Registration happens in init functions, before any Open; the lock makes
// a later one safe as well.

package trace

import (
	"fmt"
	"io"
	"sync"
)

// A NewReaderFunc reads a trace of one format from r, which starts at the
// format's first byte (after any gzip layer, whose errors reach it as
// *ParseError). name is for errors and reports; o is never nil. Bad input
// is a *ParseError.
type NewReaderFunc func(r io.Reader, name string, o *Options) (Reader, error)

// detected are the formats that Open tells by their first bytes (after
// any gzip layer), with the package that reads each. Anything else is
// read as CSV.
var detected = []struct {
	format Format
	magic  string
	pkg    string
}{
	// 0x80 is the PROTO opcode that starts every pickle of protocol 2 or
	// later: what both Python 3's pickle.dump and libtorch's C++ pickler
	// write.
	{FormatSnapshot, "\x80", "github.com/streamalloc/streamalloc/trace/torchsnap"},
}

var registered struct {
	sync.RWMutex
	readers map[Format]NewReaderFunc
}

// RegisterReader makes Open and NewReader read the traces of format f
// with newReader. The package that reads a format calls it from an init
// function; registering f again replaces its reader, and a nil
// newReader removes it. Only formats that Open detects by content are
// ever read (FormatSnapshot); CSV's reader is this package's own.
func RegisterReader(f Format, newReader NewReaderFunc) {
	registered.Lock()
	defer registered.Unlock()
	if registered.readers == nil {
		registered.readers = make(map[Format]NewReaderFunc)
	}
	registered.readers[f] = newReader
}

// readerOf returns the registered reader of f, or nil.
func readerOf(f Format) NewReaderFunc {
	registered.RLock()
	defer registered.RUnlock()
	return registered.readers[f]
}

// detect returns the index in detected of the format whose magic starts
// the content that peek shows, or -1.
func detect(peek func(int) ([]byte, error)) int {
	for i, d := range detected {
		if b, _ := peek(len(d.magic)); string(b) == d.magic {
			return i
		}
	}
	return -1
}

// readDetected reads r as the i-th detected format, with its registered
// reader.
func readDetected(i int, r io.Reader, name string, o *Options) (Reader, error) {
	d := detected[i]
	newReader := readerOf(d.format)
	if newReader == nil {
		return nil, &ParseError{File: name,
			Msg: fmt.Sprintf("a %s trace, which this program cannot read: its reader is package %s, which the program does not import", d.format, d.pkg),
			Err: ErrFormat}
	}
	return newReader(r, name, o)
}
