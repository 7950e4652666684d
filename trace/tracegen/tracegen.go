// Package tracegen writes synthetic RMM allocation logs of any size, for
// measuring what a replay costs at scale: how fast the replay, the
// resource and the simulated GPU go through ten million events, and how
// much host memory they need while two hundred thousand blocks are live on
// ten thousand streams.
//
// A Churn log has three phases. It allocates Live blocks (the ramp), then
// repeats "free a live block chosen at random, allocate a new one in its
// place" (the churn), then frees what is left (the drain), so that exactly
// Live blocks are live at the peak and the log has exactly Events events
// (the churn is cut short where the drain must begin). Sizes are
// log-uniform between MinSize and MaxSize, rounded to 256 bytes. Each
// block lives on one of Streams streams and is freed there, but one free
// in CrossEvery (if set) is made on another stream, to exercise the
// cross-stream path. Each event is one microsecond after the one before.
// Everything is decided by Seed: two readers of one Config give the same
// bytes.
//
// The reader is produced on the fly: it holds the live blocks (16 bytes
// each) and one line, never the log, so a test can replay a log of
// millions of events without the log ever existing.
package tracegen

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// ErrConfig is the error, wrapped, of a Config that describes no log.
var ErrConfig = errors.New("tracegen: bad configuration")

// header is the RMM log's first line (trace.Header; this package is a
// leaf and does not import trace).
const header = "Thread,Time,Action,Pointer,Size,Stream"

// Config describes a Churn log.
type Config struct {
	Events  int   // events in the log: even (each block is allocated and freed), at least 2*Live
	Live    int   // blocks live at the peak, at least 1
	Streams int   // distinct streams, at least 1
	MinSize int64 // smallest block (0: 256 bytes)
	MaxSize int64 // largest block (0: 1 MiB)
	// CrossEvery makes one free in CrossEvery on another stream than the
	// block's; 0 never does.
	CrossEvery int
	Seed       uint64
}

// Churn returns a reader of the RMM log c describes.
func Churn(c Config) (io.Reader, error) {
	if c.MinSize == 0 {
		c.MinSize = 256
	}
	if c.MaxSize == 0 {
		c.MaxSize = 1 << 20
	}
	switch {
	case c.Live < 1, c.Streams < 1, c.Events < 2*c.Live, c.Events%2 != 0:
		return nil, fmt.Errorf("%w: %d events, %d live, %d streams (want live >= 1, streams >= 1, an even number of events >= 2*live)",
			ErrConfig, c.Events, c.Live, c.Streams)
	case c.MinSize < 1, c.MaxSize < c.MinSize, c.CrossEvery < 0:
		return nil, fmt.Errorf("%w: sizes %d-%d, cross every %d", ErrConfig, c.MinSize, c.MaxSize, c.CrossEvery)
	}
	g := &churn{c: c, rng: rand.New(rand.NewPCG(c.Seed, 0x7472616365)), slots: make([]slot, 0, c.Live)}
	g.logMin = math.Log(float64(c.MinSize))
	g.logSpan = math.Log(float64(c.MaxSize)) - g.logMin
	g.rest = append(g.buf, header+"\n"...)
	return g, nil
}

type slot struct {
	addr   uint64
	size   int64
	stream uint32
}

type churn struct {
	c       Config
	rng     *rand.Rand
	slots   []slot
	emitted int // events written
	next    uint64
	logMin  float64
	logSpan float64
	buf     []byte // the line being written
	rest    []byte // what Read has not returned of it
	drain   int    // next slot the drain frees
}

// Read implements io.Reader.
func (g *churn) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(g.rest) == 0 && !g.step() {
			if n == 0 {
				return 0, io.EOF
			}
			break
		}
		k := copy(p[n:], g.rest)
		n += k
		g.rest = g.rest[k:]
	}
	return n, nil
}

// step writes the next event into buf; false at the end of the log.
func (g *churn) step() bool {
	if g.emitted >= g.c.Events {
		return false
	}
	// The drain frees the Live blocks left at the end; before it, a
	// churn step is a free then an allocation.
	left := g.c.Events - g.emitted
	switch {
	case len(g.slots) < g.c.Live && g.drain == 0 && left > len(g.slots):
		g.slots = append(g.slots, g.newSlot())
		g.alloc(g.slots[len(g.slots)-1])
	case left <= len(g.slots)-g.drain:
		s := g.slots[g.drain]
		g.drain++
		g.free(s, s.stream)
	case g.emitted%2 == g.c.Live%2:
		// free: its slot is refilled by the next event
		i := g.rng.IntN(len(g.slots))
		s := g.slots[i]
		stream := s.stream
		if g.c.CrossEvery > 0 && g.c.Streams > 1 && g.rng.IntN(g.c.CrossEvery) == 0 {
			stream = (stream + 1 + uint32(g.rng.IntN(g.c.Streams-1))) % uint32(g.c.Streams)
		}
		g.free(s, stream)
		g.slots[i] = g.slots[len(g.slots)-1]
		g.slots = g.slots[:len(g.slots)-1]
	default:
		g.slots = append(g.slots, g.newSlot())
		g.alloc(g.slots[len(g.slots)-1])
	}
	g.emitted++
	return true
}

func (g *churn) newSlot() slot {
	size := int64(math.Exp(g.logMin + g.rng.Float64()*g.logSpan))
	size = max(g.c.MinSize, min(g.c.MaxSize, (size+255)&^255))
	g.next += uint64(size+511) &^ 511
	return slot{addr: 0x7f0000000000 + g.next, size: size, stream: uint32(g.rng.IntN(g.c.Streams))}
}

func (g *churn) alloc(s slot)               { g.event("allocate", s, s.stream) }
func (g *churn) free(s slot, stream uint32) { g.event("free", s, stream) }

// event appends one line: thread 1, one microsecond per event from 10:00.
func (g *churn) event(action string, s slot, stream uint32) {
	t := 10*time.Hour + time.Duration(g.emitted+1)*time.Microsecond
	secs := t % time.Minute
	b := append(g.buf[:0], "1,"...)
	b = appendDigits(b, int64(t/time.Hour), 2)
	b = append(b, ':')
	b = appendDigits(b, int64(t/time.Minute%60), 2)
	b = append(b, ':')
	b = appendDigits(b, int64(secs/time.Second), 2)
	b = append(b, '.')
	b = appendDigits(b, int64(secs%time.Second/time.Microsecond), 6)
	b = append(b, ',')
	b = append(b, action...)
	b = append(b, ",0x"...)
	b = strconv.AppendUint(b, s.addr, 16)
	b = append(b, ',')
	b = strconv.AppendInt(b, s.size, 10)
	b = append(b, ",0x"...)
	// Stream ids look like cudaStream_t values; stream 0 is the default.
	b = strconv.AppendUint(b, streamID(stream), 16)
	g.buf = append(b, '\n')
	g.rest = g.buf
}

// appendDigits appends v with width digits, zero-padded (hours past 99
// take more).
func appendDigits(b []byte, v int64, width int) []byte {
	for d := int64(10); width > 1; width-- {
		if v < d {
			b = append(b, '0')
		}
		d *= 10
	}
	return strconv.AppendInt(b, v, 10)
}

// streamID is the recorded id of stream index i.
func streamID(i uint32) uint64 {
	if i == 0 {
		return 0
	}
	return 0x7f3a00000000 + uint64(i)<<9
}
