// The messages of the protocol: fixed 160-byte frames, little-endian, so
// that a reader never trusts a length from the other side.
//
//	offset size field
//	0      4    magic "SAIP"
//	4      1    kind (hello, helloBack, lend, giveBack, bye, lendVirtual)
//	5      3    zero
//	8      4    handle type (hello: HandlePOSIX, the pool's descriptor
//	            attached; HandleFabric, its handle in a; HandleNone: no
//	            pool, Virtual memory)
//	12     4    zero
//	16     8    id (lend, giveBack, lendVirtual)
//	24     8    size in bytes (lend, lendVirtual)
//	32     64   a: the pool's fabric handle (a hello of HandleFabric),
//	            the allocation's export data (lend)
//	96     64   b: an event handle (hello: the exporter's lend event;
//	            helloBack: the importer's return event)
//
// A field a frame's kind does not use is zero: a POSIX or Virtual hello
// carries no fabric handle, a lendVirtual no export data (its export
// follows the frame), a give-back or a bye nothing but its id.
// A lendVirtual frame is followed at once by the range's export in
// virtual_wire.go's encoding (a header, then one message per piece with
// its descriptor), written under the same write lock, so that nothing
// comes between them.
//
// A frame with another magic, an unknown kind, non-zero padding, data in
// a field its kind does not use, a hello of another handle type, or a
// lend of a size that is not a positive int is ErrProtocol.

package ipc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
)

const frameSize = 160

type kind uint8

const (
	kindHello     kind = 1 // exporter -> importer, with the pool's descriptor
	kindHelloBack kind = 2 // importer -> exporter
	kindLend      kind = 3 // exporter -> importer
	kindGiveBack  kind = 4 // importer -> exporter
	kindBye       kind = 5 // either way: no more frames but the answering bye
	// exporter -> importer, followed by the export of a Virtual range
	kindLendVirtual kind = 6
)

type frame struct {
	kind   kind
	handle int32
	id     uint64
	size   uint64
	a, b   [64]byte
}

func (f *frame) marshal() []byte {
	b := make([]byte, frameSize)
	copy(b, "SAIP")
	b[4] = byte(f.kind)
	binary.LittleEndian.PutUint32(b[8:], uint32(f.handle))
	binary.LittleEndian.PutUint64(b[16:], f.id)
	binary.LittleEndian.PutUint64(b[24:], f.size)
	copy(b[32:96], f.a[:])
	copy(b[96:160], f.b[:])
	return b
}

func parseFrame(b []byte) (frame, error) {
	var f frame
	if len(b) != frameSize || string(b[:4]) != "SAIP" {
		return f, fmt.Errorf("ipc: not a frame of this protocol: %w", ErrProtocol)
	}
	if b[5]|b[6]|b[7]|b[12]|b[13]|b[14]|b[15] != 0 {
		return f, fmt.Errorf("ipc: frame padding not zero: %w", ErrProtocol)
	}
	f.kind = kind(b[4])
	if f.kind < kindHello || f.kind > kindLendVirtual {
		return f, fmt.Errorf("ipc: frame kind %d: %w", f.kind, ErrProtocol)
	}
	f.handle = int32(binary.LittleEndian.Uint32(b[8:]))
	f.id = binary.LittleEndian.Uint64(b[16:])
	f.size = binary.LittleEndian.Uint64(b[24:])
	if (f.kind == kindLend || f.kind == kindLendVirtual) && (f.size == 0 || f.size > math.MaxInt) {
		// An allocation's size is positive and an int (Import.Size).
		return f, fmt.Errorf("ipc: lend of %d bytes: %w", f.size, ErrProtocol)
	}
	copy(f.a[:], b[32:96])
	copy(f.b[:], b[96:160])
	if f.kind == kindHello {
		if ht := gpu.HandleType(f.handle); ht != gpu.HandleNone && ht != gpu.HandlePOSIX && ht != gpu.HandleFabric {
			return f, fmt.Errorf("ipc: a hello for handle type %#x: %w", f.handle, ErrProtocol)
		}
	}
	if u := f.kind.uses(gpu.HandleType(f.handle)); (!u.handle && f.handle != 0) || (!u.id && f.id != 0) ||
		(!u.size && f.size != 0) || (!u.a && f.a != [64]byte{}) || (!u.b && f.b != [64]byte{}) {
		return f, fmt.Errorf("ipc: a frame of kind %d with data in a field it does not use: %w", f.kind, ErrProtocol)
	}
	return f, nil
}

// fields are the fields of a frame a kind uses.
type fields struct{ handle, id, size, a, b bool }

// uses says which fields a frame of kind k uses; ht is a hello's handle
// type, which decides whether it carries a fabric handle.
func (k kind) uses(ht gpu.HandleType) fields {
	switch k {
	case kindHello:
		return fields{handle: true, a: ht == gpu.HandleFabric, b: true}
	case kindHelloBack:
		return fields{b: true}
	case kindLend:
		return fields{id: true, size: true, a: true}
	case kindGiveBack:
		return fields{id: true}
	case kindLendVirtual:
		return fields{id: true, size: true}
	}
	return fields{} // a bye
}

// writeLock serializes one side's frames so that frames of several
// writers never interleave. It is taken with a context: a writer stuck
// behind a peer that stops reading must not hold up, without bound, one
// that has a deadline.
type writeLock chan struct{}

func newWriteLock() writeLock { return make(writeLock, 1) }

// lock takes w, or returns ctx's error when ctx ends first.
func (w writeLock) lock(ctx context.Context) error {
	select {
	case w <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w writeLock) unlock() { <-w }

// errFrameCut marks a write that ctx ended after part of the frame had
// gone: the stream is no longer framed, and the caller must end the link.
var errFrameCut = errors.New("frame cut short")

// writeLocked sends f on c, with the lock held, until ctx ends: ctx's
// deadline is the write deadline, and its cancellation ends the write
// too. When ctx ends the write the error is ctx's (context.Canceled or
// context.DeadlineExceeded); if part of the frame had gone it also
// matches errFrameCut, and c's write side has been shut so that the peer
// reads the connection's end rather than half a frame followed by
// another.
func writeLocked(ctx context.Context, c *net.UnixConn, f frame) error {
	return writeMsgsLocked(ctx, c, []message{{b: f.marshal()}})
}

// message is bytes to write, and the descriptor that travels with them
// (nil: none).
type message struct {
	b    []byte
	file *os.File
}

// writeMsgsLocked is writeLocked of several messages, which the peer
// reads as one unit: a write that ctx ends after any byte of the first
// has gone cuts the unit (errFrameCut), and shuts c's write side.
func writeMsgsLocked(ctx context.Context, c *net.UnixConn, msgs []message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var total, sent int
	for _, m := range msgs {
		total += len(m.b)
	}
	write := func() error {
		for _, m := range msgs {
			n, err := writeMessage(c, m)
			sent += n
			if err != nil {
				return err
			}
		}
		return nil
	}
	if ctx.Done() == nil { // never ends: no deadline to set
		return lostIfEOF(write())
	}
	d, _ := ctx.Deadline() // zero: none
	if err := c.SetWriteDeadline(d); err != nil {
		return lostIfEOF(err)
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		c.SetWriteDeadline(time.Unix(1, 0)) // in the past: the write returns
		close(fired)
	})
	err := write()
	if !stop() {
		<-fired
	}
	c.SetWriteDeadline(time.Time{})
	if err == nil {
		return nil
	}
	cerr := ctx.Err()
	if cerr == nil && !d.IsZero() && errors.Is(err, os.ErrDeadlineExceeded) {
		// The socket's deadline can pass a moment before ctx's timer.
		cerr = context.DeadlineExceeded
	}
	if cerr != nil {
		if sent > 0 {
			c.CloseWrite()
			return fmt.Errorf("%w after %d of %d bytes: %w", errFrameCut, sent, total, cerr)
		}
		return cerr
	}
	return lostIfEOF(err)
}

// writeFrame takes w and sends f on c until ctx ends (see writeLocked).
func writeFrame(ctx context.Context, w writeLock, c *net.UnixConn, f frame) error {
	if err := w.lock(ctx); err != nil {
		return err
	}
	defer w.unlock()
	return writeLocked(ctx, c, f)
}

// readFrame reads one frame of the wanted kind, or a bye (want 0: any).
func readFrame(c net.Conn, want kind) (frame, error) {
	b := make([]byte, frameSize)
	if _, err := io.ReadFull(c, b); err != nil {
		return frame{}, lostIfEOF(err)
	}
	f, err := parseFrame(b)
	if err != nil {
		return f, err
	}
	if want != 0 && f.kind != want && f.kind != kindBye {
		return f, fmt.Errorf("ipc: frame kind %d, want %d: %w", f.kind, want, ErrProtocol)
	}
	return f, nil
}
