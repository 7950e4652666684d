// The RMM CSV log writer.
//
// It writes exactly what RMM's logging_resource_adaptor writes: the header,
// then one line per event with the time of day as HH:MM:SS.ffffff, the
// pointer and the stream as 0x-prefixed lower-case hex, the thread and the
// size in decimal. Each line is formatted at the end of the writer's
// buffer of 64 KiB (no copy after it), each field's text by a copy of a
// fixed size (no call to memmove), and the buffer goes to the io.Writer
// when less than the longest line's room is left, so writing an event
// allocates nothing. What
// repeats from line to line is formatted once and kept: the thread (one
// logger writes one value), the line's second, HH:MM:SS. (a second holds
// thousands of lines), and the last value of the microseconds, the
// pointer, the size and the stream, each with its text (a free names the
// pointer and size of an allocation a few lines before, often the line
// before; a program's lines name a few streams). The hex fields are
// written a digit per four bits, without division, and the decimal ones
// two digits per division.
//
// The writer is safe for concurrent use: the logging adaptor calls it from
// every goroutine that allocates, and a mutex keeps lines whole and in one
// order. Errors are sticky: after the first failed write every call
// returns that error, so a full disk is reported once and not silently
// interleaved with partial lines.

package trace

import (
	"fmt"
	"io"
	"math/bits"
	"strconv"
	"sync"
	"time"
)

// CSVWriter writes an RMM CSV log. Create one with NewCSVWriter.
type CSVWriter struct {
	mu     sync.Mutex
	out    io.Writer
	buf    []byte // the lines not written to out yet; capacity csvBuffer
	header bool
	err    error
	// Kept from the last line (see the file comment): the thread, the
	// second of the day and its HH:MM:SS. text, the microseconds of the
	// second and their text (clock holds both texts, 15 bytes and one
	// more that a line overwrites), the pointer, the size and the stream.
	thread            fieldText
	sec, us           int64
	clock             [16]byte
	ptr, size, stream fieldText
}

// fieldText is the last value of a field and its text, n bytes of text.
type fieldText struct {
	v    uint64
	ok   bool
	n    uint8
	text [20]byte
}

// hex makes v the field's value, in hex, formatting it only if it is not
// the last value.
func (f *fieldText) hex(v uint64) {
	if !f.ok || f.v != v {
		f.v, f.ok, f.n = v, true, uint8(len(appendHex(f.text[:0], v)))
	}
}

// dec makes v the field's value, in decimal, formatting it only if it is
// not the last value.
func (f *fieldText) dec(v uint64) {
	if !f.ok || f.v != v {
		f.v, f.ok, f.n = v, true, uint8(len(strconv.AppendUint(f.text[:0], v, 10)))
	}
}

// put copies the field's text to b[i:] and returns the index after it.
// The whole array is copied, a fixed-size move the compiler writes out
// instead of a call to memmove (which cost a line a tenth of its time on
// the H100 machine's host); only the first n bytes count, the rest is
// overwritten or beyond the line. b[i:] has at least 20 bytes.
func (f *fieldText) put(b []byte, i int) int {
	*(*[20]byte)(b[i:]) = f.text
	return i + int(f.n)
}

// opText is the text of each valid Op, padded to 16 bytes, and its length.
var opText = func() (t [Free + 1]struct {
	text [16]byte
	n    int
}) {
	for op := Alloc; op <= Free; op++ {
		t[op].n = copy(t[op].text[:], op.String())
	}
	return t
}()

// NewCSVWriter returns a writer of an RMM CSV log to w. The header is
// written with the first event, or by Flush if there is none. Call Flush
// when done; the writer buffers.
func NewCSVWriter(w io.Writer) *CSVWriter {
	return &CSVWriter{out: w, buf: make([]byte, 0, csvBuffer), sec: -1, us: -1}
}

// csvBuffer is the size of the writer's buffer, and csvLineMax the
// longest line: a thread and a size of 20 digits, the time (15), "allocate
// failure" (16), two 0x-prefixed hex values of 16 digits, five commas and
// the newline make 112 bytes.
const (
	csvBuffer  = 64 << 10
	csvLineMax = 128
)

// flushLocked writes the buffer to out. cw.mu must be held. A short write
// without an error is io.ErrShortWrite, as bufio.Writer reports it.
func (cw *CSVWriter) flushLocked() error {
	if len(cw.buf) == 0 {
		return nil
	}
	n, err := cw.out.Write(cw.buf)
	if err == nil && n < len(cw.buf) {
		err = io.ErrShortWrite
	}
	cw.buf = cw.buf[:0]
	return err
}

// Write appends one event. The time is written as the time of day:
// e.Time modulo 24 hours, truncated to the microsecond (use SinceMidnight
// to turn a wall-clock time into one). A negative size, or an Op that is
// not Alloc, AllocFailure or Free, is refused with an error and nothing is
// written.
func (cw *CSVWriter) Write(e Event) error {
	if err := checkEvent(e); err != nil {
		return err
	}
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.writeLocked(e)
}

// WriteIf runs do with the writer's lock held and, if do returns true,
// appends e as Write does, before any other goroutine's line. A logger
// uses it to write the line of an operation in the order the operation
// took effect: a free made inside do is logged before any allocation that
// gets its memory back can log its own line. do must not call the writer.
// The error is Write's; if do returns false nothing is written and the
// error is nil.
func (cw *CSVWriter) WriteIf(e Event, do func() bool) error {
	if err := checkEvent(e); err != nil {
		return err
	}
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if !do() {
		return nil
	}
	return cw.writeLocked(e)
}

func checkEvent(e Event) error {
	if e.Size < 0 {
		return fmt.Errorf("trace: write: negative size %d", e.Size)
	}
	if e.Op < Alloc || e.Op > Free {
		return fmt.Errorf("trace: write: invalid op %v", e.Op)
	}
	return nil
}

// writeLocked appends e. cw.mu must be held.
func (cw *CSVWriter) writeLocked(e Event) error {
	if cw.err != nil || !cw.header {
		if err := cw.writeHeader(); err != nil {
			return err
		}
	}
	if len(cw.buf) > csvBuffer-csvLineMax {
		if err := cw.flushLocked(); err != nil {
			cw.err = fmt.Errorf("trace: write: %w", err)
			return cw.err
		}
	}
	// The line is written in a window of csvLineMax bytes at the end of
	// the buffer (its capacity holds it), with fixed-size copies.
	n := len(cw.buf)
	b := cw.buf[n : n+csvLineMax]
	cw.thread.dec(e.Thread)
	i := cw.thread.put(b, 0)
	b[i] = ','
	cw.setClock(e.Time)
	*(*[16]byte)(b[i+1:]) = cw.clock
	i += 16
	b[i] = ','
	op := &opText[e.Op]
	*(*[16]byte)(b[i+1:]) = op.text
	i += 1 + op.n
	b[i], b[i+1], b[i+2] = ',', '0', 'x'
	cw.ptr.hex(e.Ptr)
	i = cw.ptr.put(b, i+3)
	b[i] = ','
	cw.size.dec(uint64(e.Size))
	i = cw.size.put(b, i+1)
	b[i], b[i+1], b[i+2] = ',', '0', 'x'
	cw.stream.hex(e.Stream)
	i = cw.stream.put(b, i+3)
	b[i] = '\n'
	cw.buf = cw.buf[:n+i+1]
	return nil
}

// Flush writes the header if no event was written, and everything
// buffered, to the underlying writer.
func (cw *CSVWriter) Flush() error {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if err := cw.writeHeader(); err != nil {
		return err
	}
	if err := cw.flushLocked(); err != nil {
		cw.err = fmt.Errorf("trace: flush: %w", err)
		return cw.err
	}
	return nil
}

// writeHeader writes the header once. cw.mu must be held.
func (cw *CSVWriter) writeHeader() error {
	if cw.err != nil {
		return cw.err
	}
	if cw.header {
		return nil
	}
	cw.header = true
	cw.buf = append(cw.buf, Header+"\n"...)
	return nil
}

// setClock makes cw.clock the text of the time of day d (modulo 24
// hours), HH:MM:SS.ffffff, reusing the text of the last line's second and
// microseconds where they are the same. cw.mu must be held.
func (cw *CSVWriter) setClock(d time.Duration) {
	d %= 24 * time.Hour
	if d < 0 {
		d += 24 * time.Hour
	}
	us := int64(d / time.Microsecond)
	if sec := us / 1_000_000; sec != cw.sec {
		var t [15]byte
		appendClock(t[:0], time.Duration(sec)*time.Second)
		cw.sec = sec
		copy(cw.clock[:9], t[:9])
	}
	if frac := us % 1_000_000; frac != cw.us {
		cw.us = frac
		hi, mid, lo := frac/10_000, frac/100%100, frac%100
		cw.clock[9], cw.clock[10] = digits2[2*hi], digits2[2*hi+1]
		cw.clock[11], cw.clock[12] = digits2[2*mid], digits2[2*mid+1]
		cw.clock[13], cw.clock[14] = digits2[2*lo], digits2[2*lo+1]
	}
}

// digits2 holds "00" to "99".
const digits2 = "00010203040506070809" + "10111213141516171819" + "20212223242526272829" + "30313233343536373839" +
	"40414243444546474849" + "50515253545556575859" + "60616263646566676869" + "70717273747576777879" +
	"80818283848586878889" + "90919293949596979899"

// appendHex appends v in lower-case hex without leading zeros ("0" for 0).
func appendHex(b []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	n := max(1, (bits.Len64(v)+3)/4)
	var h [16]byte
	for i := n - 1; i >= 0; i-- {
		h[i] = digits[v&0xf]
		v >>= 4
	}
	return append(b, h[:n]...)
}

// appendClock appends d modulo 24 hours as HH:MM:SS.ffffff.
func appendClock(b []byte, d time.Duration) []byte {
	d %= 24 * time.Hour
	if d < 0 {
		d += 24 * time.Hour
	}
	us := int64(d / time.Microsecond)
	b = append2(b, us/3_600_000_000)
	b = append(b, ':')
	b = append2(b, us/60_000_000%60)
	b = append(b, ':')
	b = append2(b, us/1_000_000%60)
	b = append(b, '.')
	frac := us % 1_000_000
	for div := int64(100_000); div > 0; div /= 10 {
		b = append(b, byte('0'+frac/div%10))
	}
	return b
}

func append2(b []byte, v int64) []byte {
	return append(b, byte('0'+v/10), byte('0'+v%10))
}

// SinceMidnight returns the time of day of t in t's location, the value
// RMM writes in its Time column.
func SinceMidnight(t time.Time) time.Duration {
	h, m, s := t.Clock()
	return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute +
		time.Duration(s)*time.Second + time.Duration(t.Nanosecond())
}
