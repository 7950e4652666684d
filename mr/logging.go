// Logging: an adaptor that writes every allocation, failed allocation and
// free to a log in the CSV format of RMM's logging_resource_adaptor, so
// that the log can be replayed (package replay, `streamalloc replay`) or
// read by RMM's own tools:
//
//	Thread,Time,Action,Pointer,Size,Stream
//	0,14:03:07.123456,allocate,0x7f0000100000,1024,0x3
//	0,14:03:07.123502,free,0x7f0000100000,1024,0x3
//
// The format is written by trace.CSVWriter (one implementation of it in the
// project). Time is the time of day, HH:MM:SS.ffffff: the wall clock read
// once when the logger is made, advanced by a monotonic clock, so lines
// keep their order even if the wall clock is stepped, and a logger that
// outlives a change of the local time zone's offset keeps the old offset.
// The clock is internal/cpuclock, one reading per line: the CPU's
// time-stamp counter scaled to the runtime's monotonic clock, where the
// counter can be trusted (a reading costs a quarter of time.Since's, which
// was a fifth of a pair's cost in the log on the H100 machine's host; a
// wall-clock reading costs two clock reads and a time-zone lookup), and
// the runtime's monotonic clock elsewhere. Pointer is
// the device address and Stream the stream's ID (gpu.Stream.ID; RMM writes
// the cudaStream_t value), both in hex. Go has no thread ids that mean
// anything to a program, so the Thread column holds LoggingOptions.Thread,
// a number chosen per logger (0 unless set), the same on every line of one
// logger: it lets logs of several loggers be merged and told apart.
//
// Invariants:
//   - One line per allocation the upstream granted ("allocate"), per
//     allocation it refused ("allocate failure", pointer 0), and per free it
//     accepted ("free"). Bad input is not logged: the adaptor refuses it
//     before it reaches the upstream, except on the hot path (over an
//     upstream that checks owners, with a writer of the adaptor's own),
//     where the upstream checks the stream of a request of more than 0
//     bytes or a free of a pointer other than null, and the adaptor checks
//     it only when the upstream refused: a request on a bad stream is
//     answered with the adaptor's own stream error, unlogged.
//   - The free of an address is logged before any later allocation of the
//     same address: the free's line is written while the pointer table's
//     shard lock is held, and an allocation that gets the address back
//     takes that lock before it writes its line. So a replay never sees an
//     address allocated twice. Over an upstream that checks owners
//     (owner.go) the logger keeps no table: the upstream refuses bad frees
//     itself. A logger with a writer of its own (NewLogging) runs the free
//     under the writer's lock (trace.CSVWriter.WriteIf), which an
//     allocation's line also takes, with the same effect; frees through
//     it then reach that upstream one at a time, which costs little over a
//     Pool, whose free does not block unless its ReleaseThreshold makes it
//     give a chunk back to its upstream. A writer given to NewLoggingTo may
//     be shared with a logger below this one (the pool's upstream, or the
//     next level of the stack), whose line is written inside the free: the
//     free and its line run under the table's shard lock instead, which
//     an allocation takes to write its line.
//   - A failed write does not fail the allocation or free (the memory is
//     already handed out or freed); the first write error is kept and
//     returned by Err and Flush, and later lines are not written (the
//     trace writer's errors are sticky).

package mr

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/internal/cpuclock"
	"github.com/streamalloc/streamalloc/trace"
)

// LoggingOptions configure a Logging adaptor.
type LoggingOptions struct {
	// Thread is written in the Thread column of every line.
	Thread uint64
	// Now, if set, replaces time.Now (for tests and replays with a
	// simulated clock).
	Now func() time.Time
}

// Logging writes an RMM CSV log of what passes through it. It is safe for
// concurrent use.
type Logging struct {
	// What the hot path reads comes first.
	passThrough
	owned
	// fast: trusted and not shared, the hot path of Allocate and
	// Deallocate.
	fast   bool
	w      *trace.CSVWriter
	thread uint64
	now    func() time.Time // nil: day and the monotonic clock from base
	base   time.Duration    // cpuclock.Now when the logger was made
	day    time.Duration    // the time of day then
	dev    gpu.Device
	// shared: w may be shared with another logger (NewLoggingTo), so no
	// upstream call is made under w's lock.
	shared bool
	known  knownStreams // streams checked (args.go)
	// live holds the allocations unless trusted; if trusted and shared,
	// only its shard locks are used.
	live ptrTable[gpu.DevicePtr, struct{}]

	errMu sync.Mutex
	err   error
}

// NewLogging returns a Logging adaptor over upstream that writes its log
// to w. Call Flush when done: the log is buffered.
func NewLogging(upstream Resource, w io.Writer, opts LoggingOptions) *Logging {
	l := NewLoggingTo(upstream, trace.NewCSVWriter(w), opts)
	l.shared = false
	l.fast = l.trusted()
	return l
}

// NewLoggingTo is NewLogging writing to an existing CSV writer, which
// several loggers may share (their lines interleave whole).
func NewLoggingTo(upstream Resource, w *trace.CSVWriter, opts LoggingOptions) *Logging {
	base, wall := cpuclock.Now(), time.Now()
	return &Logging{passThrough: passThrough{upstream}, dev: upstream.Device(), w: w, thread: opts.Thread,
		now: opts.Now, base: base, day: trace.SinceMidnight(wall), owned: ownedOver(upstream), shared: true}
}

// clock is the time of day of a line written now.
func (l *Logging) clock() time.Duration {
	if l.now != nil {
		return trace.SinceMidnight(l.now())
	}
	return l.day + cpuclock.Now() - l.base
}

func (l *Logging) event(op trace.Op, p gpu.DevicePtr, size int, s gpu.Stream) trace.Event {
	return trace.Event{Op: op, Thread: l.thread, Time: l.clock(), Ptr: uint64(p), Size: int64(size), Stream: s.ID()}
}

func (l *Logging) write(op trace.Op, p gpu.DevicePtr, size int, s gpu.Stream) {
	l.keep(l.w.Write(l.event(op, p, size, s)))
}

// keep keeps err, if it is the first error writing the log.
func (l *Logging) keep(err error) {
	if err != nil {
		l.errMu.Lock()
		if l.err == nil {
			l.err = fmt.Errorf("logging: %w", err)
		}
		l.errMu.Unlock()
	}
}

// Allocate allocates from the upstream and logs the allocation or its
// failure.
func (l *Logging) Allocate(size int, s gpu.Stream) (gpu.DevicePtr, error) {
	// The hot path (over an upstream that checks owners, with a writer of
	// the adaptor's own) is written out here and in AllocateOwned, so
	// that a request makes one call into the adaptor. The upstream checks
	// the stream of a request of more than 0 bytes, and the adaptor
	// checks it only if the upstream refused the request: a bad stream
	// is then refused as args.go words it, and not logged.
	if l.fast && size > 0 && s != nil {
		p, err := l.oup.AllocateOwned(size, s, l.owner)
		if err != nil {
			return 0, l.allocFailed(size, s, err)
		}
		l.write(trace.Alloc, p, size, s)
		return p, nil
	}
	return l.allocate(size, s, l.owner)
}

// AllocateOwned is Allocate for owner o (owner.go).
func (l *Logging) AllocateOwned(size int, s gpu.Stream, o Owner) (gpu.DevicePtr, error) {
	if l.fast && size > 0 && s != nil {
		p, err := l.oup.AllocateOwned(size, s, o)
		if err != nil {
			return 0, l.allocFailed(size, s, err)
		}
		l.write(trace.Alloc, p, size, s)
		return p, nil
	}
	return l.allocate(size, s, o)
}

// allocFailed is the error of a request of size bytes on s that the
// upstream refused with err on the hot path, logged as a failure unless
// the stream is bad.
//
//go:noinline
func (l *Logging) allocFailed(size int, s gpu.Stream, err error) error {
	if !l.known.ok(l.dev, s) {
		return streamError("logging", opAllocate, s)
	}
	l.write(trace.AllocFailure, 0, size, s)
	return fmt.Errorf("logging: %w", err)
}

// allocate is Allocate checked step by step (args.go), for every request
// the hot path does not take.
func (l *Logging) allocate(size int, s gpu.Stream, o Owner) (gpu.DevicePtr, error) {
	if zero, err := l.known.checkAlloc("logging", l.dev, size, s); zero || err != nil {
		return 0, err
	}
	if l.trusted() {
		p, err := l.oup.AllocateOwned(size, s, o)
		if err != nil {
			l.write(trace.AllocFailure, 0, size, s)
			return 0, fmt.Errorf("logging: %w", err)
		}
		if l.shared {
			l.live.underShard(l.live.shardIndex(p), func() { l.write(trace.Alloc, p, size, s) })
			return p, nil
		}
		l.write(trace.Alloc, p, size, s)
		return p, nil
	}
	p, err := l.up.Allocate(size, s)
	if err != nil {
		l.write(trace.AllocFailure, 0, size, s)
		return 0, fmt.Errorf("logging: %w", err)
	}
	l.live.insert(p, size, struct{}{}, func() { l.write(trace.Alloc, p, size, s) })
	return p, nil
}

// Deallocate frees p through the upstream and logs the free. Bad frees are
// refused with typed errors before they reach the upstream, and not
// logged.
func (l *Logging) Deallocate(p gpu.DevicePtr, size int, s gpu.Stream) error {
	// Written out as in Allocate: the upstream checks the stream of a
	// free of a pointer other than null, and nothing is logged unless it
	// accepted the free.
	if l.fast && p != 0 && size >= 0 && s != nil {
		var err error
		l.keep(l.w.WriteIf(l.event(trace.Free, p, size, s), func() bool {
			err = l.oup.DeallocateOwned(p, size, s, l.owner)
			return err == nil
		}))
		if err != nil {
			return l.freeFailed(s, err)
		}
		return nil
	}
	return l.deallocate(p, size, s, l.owner)
}

// DeallocateOwned is Deallocate for owner o (owner.go).
func (l *Logging) DeallocateOwned(p gpu.DevicePtr, size int, s gpu.Stream, o Owner) error {
	if l.fast && p != 0 && size >= 0 && s != nil {
		var err error
		l.keep(l.w.WriteIf(l.event(trace.Free, p, size, s), func() bool {
			err = l.oup.DeallocateOwned(p, size, s, o)
			return err == nil
		}))
		if err != nil {
			return l.freeFailed(s, err)
		}
		return nil
	}
	return l.deallocate(p, size, s, o)
}

// freeFailed is the error of a free on s that the upstream refused with
// err on the hot path.
//
//go:noinline
func (l *Logging) freeFailed(s gpu.Stream, err error) error {
	if !l.known.ok(l.dev, s) {
		return streamError("logging", opDeallocate, s)
	}
	return fmt.Errorf("logging: deallocate: %w", err)
}

// deallocate is Deallocate checked step by step (args.go), for every
// free the hot path does not take.
func (l *Logging) deallocate(p gpu.DevicePtr, size int, s gpu.Stream, o Owner) error {
	if null, err := l.known.checkFree("logging", l.dev, p, size, s); null || err != nil {
		return err
	}
	if l.trusted() && l.shared {
		var err error
		l.live.underShard(l.live.shardIndex(p), func() {
			if err = l.oup.DeallocateOwned(p, size, s, o); err == nil {
				l.write(trace.Free, p, size, s)
			}
		})
		if err != nil {
			return fmt.Errorf("logging: deallocate: %w", err)
		}
		return nil
	}
	if l.trusted() {
		var err error
		l.keep(l.w.WriteIf(l.event(trace.Free, p, size, s), func() bool {
			err = l.oup.DeallocateOwned(p, size, s, o)
			return err == nil
		}))
		if err != nil {
			return fmt.Errorf("logging: deallocate: %w", err)
		}
		return nil
	}
	_, err := l.live.take(p, size, func(struct{}) error {
		if err := l.up.Deallocate(p, size, s); err != nil {
			return err
		}
		l.write(trace.Free, p, size, s)
		return nil
	})
	if err != nil {
		return fmt.Errorf("logging: deallocate: %w", err)
	}
	return nil
}

// Device is the upstream's device.
func (l *Logging) Device() gpu.Device { return l.dev }

// Err returns the first error writing the log, or nil.
func (l *Logging) Err() error {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return l.err
}

// Flush writes the buffered lines (and the header, if nothing else was
// written) to the underlying writer, and returns the first error writing
// the log.
func (l *Logging) Flush() error {
	if err := l.w.Flush(); err != nil {
		l.errMu.Lock()
		if l.err == nil {
			l.err = fmt.Errorf("logging: %w", err)
		}
		l.errMu.Unlock()
	}
	return l.Err()
}
