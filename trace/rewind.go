// Reading a trace more than once, while reading its input only once.
//
// A command that replays one trace against several resources reads it
// once per resource. File.Rewind starts the trace again without reading
// the input again where it cannot:
//
//   - a reader that holds the whole trace in memory (a PyTorch snapshot,
//     decoded whole) implements Rewinder and starts again from its first
//     event: a snapshot is decoded once, however many times it is read;
//   - a regular file is read again from its first byte (a CSV log is
//     streamed, and holding it would cost memory in proportion to its
//     length);
//   - a file that cannot seek (a pipe, /dev/stdin) is copied as it is
//     read into a temporary file (the spool), which Rewind completes with
//     the rest of the input and reads from then on. The spool is unlinked
//     as soon as it is created, so nothing is left behind whatever
//     happens to the process; it costs disk space equal to the input (as
//     it arrives, compressed or not), and none once the format turns out
//     to be one a Rewinder holds.
//
// Rewind after an error starts again from the start as well; the same
// input gives the same error.

package trace

import (
	"fmt"
	"io"
	"os"
)

// Rewinder is a reader that can start again from its first event.
type Rewinder interface {
	// Rewind makes the next Next return the first event again.
	Rewind() error
}

// startSpool makes the spool of a file that cannot seek and returns the
// reader that copies the file's bytes into it as they are read.
func (f *File) startSpool() (io.Reader, error) {
	sp, err := os.CreateTemp("", "streamalloc-trace-*")
	if err != nil {
		return nil, fmt.Errorf("spooling a file that cannot seek: %w", err)
	}
	os.Remove(sp.Name()) // the open file lives on; nothing is left behind
	f.spool = sp
	return io.TeeReader(f.f, sp), nil
}

// dropSpool closes and forgets the spool, if there is one.
func (f *File) dropSpool() {
	if f.spool != nil {
		f.spool.Close()
		f.spool = nil
	}
}

// Rewind starts the trace again from its first event, reading the input
// again only if it is a regular file (see above). Errors about the
// content are *ParseError, as Open's.
func (f *File) Rewind() error {
	if r, ok := f.Reader.(Rewinder); ok {
		return r.Rewind()
	}
	var src io.ReadSeeker = f.f
	if f.spool != nil {
		if !f.drained {
			// The spool has every byte read so far (readers buffer
			// ahead, but what they read went through the tee); the
			// rest of the input follows it.
			n, err := io.Copy(f.spool, f.f)
			if err != nil {
				return fmt.Errorf("trace: %s: rewinding: %w", f.name, err)
			}
			f.drained = true
			f.size = f.counter.n + n
		}
		src = f.spool
	}
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("trace: %s: rewinding: %w", f.name, err)
	}
	f.counter = &countingReader{r: src}
	rd, format, compressed, err := newReader(f.counter, f.name, &f.opts)
	if err != nil {
		return err
	}
	f.Reader, f.format, f.compressed = rd, format, compressed
	return nil
}
