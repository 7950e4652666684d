// Package trace reads and writes allocation traces: the CSV logs of the
// RAPIDS Memory Manager (RMM) and the memory snapshots that PyTorch writes
// with torch.cuda.memory._dump_snapshot.
//
// # Model
//
// A trace is a sequence of Events in the order the program made them. An
// event allocates, fails to allocate, or frees one block, identified by its
// address in the recorded process, on one stream of the recorded process.
// Addresses and stream ids are opaque numbers: a replay maps them onto its
// own allocations and streams (package replay).
//
// # Readers
//
// Every format is read through the Reader interface, one event per Next
// call, so that the consumer decides how much to keep. The CSV reader
// streams: it holds one buffered line at a time and allocates nothing per
// event, so a log of ten million events needs no more memory than a log of
// ten. PyTorch snapshots are pickles, which can only be decoded whole; the
// snapshot reader decodes the file once, keeps the events as a compact
// slice and drops the rest (snapshots are bounded by PyTorch's max_entries).
// It is package trace/torchsnap, apart from this one so that a program
// that only reads or writes CSV (the mr logging adaptor writes it) does not
// link a pickle decoder.
//
// Open detects the format from the content, never from the file name:
// gzip by its magic bytes (1f 8b), a pickle by its PROTO opcode (0x80), and
// anything else is read as CSV and must start with the RMM header. A
// pickle is read by the reader that trace/torchsnap registers when a
// program imports it, and refused with ErrFormat otherwise.
//
// # Errors
//
// Every problem with the input is a *ParseError naming the file and the
// line (for snapshots, the trace entry), and matching one of the Err*
// sentinels below with errors.Is. No input makes a reader panic.
package trace

import (
	"errors"
	"fmt"
	"time"
)

// Op is what an event did.
type Op uint8

// The operations of a trace. The zero Op is invalid, so a zero Event is
// never mistaken for an allocation.
const (
	// Alloc is a successful allocation ("allocate" in RMM logs, "alloc" in
	// PyTorch snapshots).
	Alloc Op = iota + 1
	// AllocFailure is an allocation the recorded allocator refused
	// ("allocate failure" in RMM logs, "oom" in PyTorch snapshots). Its
	// pointer is meaningless (RMM writes the null pointer).
	AllocFailure
	// Free releases a block that an earlier Alloc returned ("free").
	Free
)

// String returns the RMM action name of op.
func (op Op) String() string {
	switch op {
	case Alloc:
		return "allocate"
	case AllocFailure:
		return "allocate failure"
	case Free:
		return "free"
	}
	return fmt.Sprintf("Op(%d)", uint8(op))
}

// Event is one record of a trace.
type Event struct {
	Op Op
	// Thread is the recording thread's id (RMM) or 0 (snapshots).
	Thread uint64
	// Time is when the event happened, as the trace states it: the time
	// of day for RMM's HH:MM:SS.ffffff, the number of seconds as written
	// for a numeric time column, the time_us field for snapshots. It is
	// never negative: a time beyond the largest Duration is an ErrTime
	// error, not a wrapped value. Readers do not check that times
	// increase; the events' order is the order of the trace.
	Time time.Duration
	// Ptr is the block's address in the recorded process.
	Ptr uint64
	// Size is the block's size in bytes; never negative.
	Size int64
	// Stream is the recorded stream's id (a cudaStream_t value; 0 is the
	// default stream).
	Stream uint64
	// Line is where the event comes from: the 1-based line of a CSV file
	// (the header is line 1), or the 1-based index of a snapshot's trace
	// entry; 0 for events a reader synthesized. It lets a consumer name
	// the line in its own errors.
	Line int64
}

// Reader yields the events of one trace in order.
type Reader interface {
	// Next returns the next event. At the end of the trace it returns
	// io.EOF; on bad input, a *ParseError. After an error every later
	// call returns the same error.
	Next() (Event, error)
	// Name is the trace's name for reports and errors: the file name
	// given to Open, or the name given to a New* constructor.
	Name() string
}

// Sentinel errors. A *ParseError matches exactly one of them with
// errors.Is, and may match the underlying error too (a gzip error, an
// I/O error).
var (
	// ErrFormat: a format that Open detects but whose reader the program
	// does not link (a PyTorch snapshot without trace/torchsnap).
	ErrFormat = errors.New("trace: unknown trace format")
	// ErrHeader: the first line of a CSV log is not the RMM header.
	ErrHeader = errors.New("trace: wrong header")
	// ErrColumns: a CSV line does not have exactly six columns.
	ErrColumns = errors.New("trace: wrong number of columns")
	// ErrLineTooLong: a CSV line is longer than MaxLineLength.
	ErrLineTooLong = errors.New("trace: line too long")
	// ErrThread, ErrTime, ErrPointer, ErrStream: a column that does not
	// parse.
	ErrThread  = errors.New("trace: bad thread id")
	ErrTime    = errors.New("trace: bad time")
	ErrPointer = errors.New("trace: bad pointer")
	ErrStream  = errors.New("trace: bad stream")
	// ErrSize: a size that is not a number, or does not fit in an int64.
	ErrSize = errors.New("trace: size is not a number")
	// ErrNegativeSize: a size below zero.
	ErrNegativeSize = errors.New("trace: negative size")
	// ErrAction: an action other than allocate, allocate failure, free.
	ErrAction = errors.New("trace: unknown action")
	// ErrCompressed: gzip data that is corrupt or truncated.
	ErrCompressed = errors.New("trace: corrupt or truncated gzip data")
	// ErrPickle: a pickle that cannot be decoded (trace/torchsnap).
	ErrPickle = errors.New("trace: unreadable pickle")
	// ErrSnapshot: a pickle that decodes but is not a PyTorch memory
	// snapshot, or a snapshot trace entry with missing or bad fields.
	ErrSnapshot = errors.New("trace: not a valid PyTorch memory snapshot")
	// ErrExpansion: a snapshot whose repeated references expand it
	// beyond Options.MaxExpansion (trace/torchsnap).
	ErrExpansion = errors.New("trace: snapshot expands beyond its bound")
	// ErrRead: the underlying reader failed.
	ErrRead = errors.New("trace: read error")
)

// ParseError reports bad input. File and Line locate it; Line is 0 when
// the problem is not on one line (an unreadable pickle, a missing header
// in an empty file still says line 1).
type ParseError struct {
	File string // the trace's name
	Line int64  // 1-based line (CSV) or trace entry (snapshot); 0 if none
	Msg  string // what is wrong, for people
	Err  error  // one of the sentinels, possibly joined with a cause
}

func (e *ParseError) Error() string {
	name := e.File
	if name == "" {
		name = "<trace>"
	}
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", name, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", name, e.Msg)
}

// Unwrap returns the sentinel (and cause) the error matches.
func (e *ParseError) Unwrap() error { return e.Err }
