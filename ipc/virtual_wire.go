// Carrying an mr.VirtualExport over a Unix stream socket: a header frame,
// then one frame per piece, a POSIX piece's descriptor attached
// (SCM_RIGHTS, fd.go). All integers are little-endian.
//
//	header: "SAVIRT01", span, start, size, pieces (uint64 each)   40 bytes
//	piece:  offset, size (uint64), handle type (int32), fabric [64]byte  84 bytes
//
// A piece's handle type is HandlePOSIX, with its descriptor attached and
// the fabric bytes zero, or HandleFabric, with its handle in the fabric
// bytes and no descriptor. The receiver refuses a malformed message
// (ErrProtocol), another handle type included, and closes every
// descriptor it received with it, so nothing leaks. The same encoding
// follows a Link's lendVirtual frame (wire.go).

package ipc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/mr"
)

const (
	virtualMagic     = "SAVIRT01"
	virtualHeaderLen = 40
	virtualPieceLen  = 84
)

// deadlineFor makes ctx's end interrupt c's blocked reads and writes; the
// returned function undoes it.
func deadlineFor(ctx context.Context, c *net.UnixConn) func() {
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	return func() {
		if !stop() {
			c.SetDeadline(time.Time{})
		}
	}
}

// ctxErr prefers ctx's error to the deadline's it caused.
func ctxErr(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

// SendVirtual writes x on c; x's descriptors stay open (x.Close after).
// ctx bounds the writes; a write that ctx cuts short shuts c's write
// side, so that the peer reads the connection's end rather than part of
// an export.
func SendVirtual(ctx context.Context, c *net.UnixConn, x mr.VirtualExport) error {
	msgs, err := virtualMessages(x)
	if err != nil {
		return fmt.Errorf("ipc: send virtual: %w", err)
	}
	if err := writeMsgsLocked(ctx, c, msgs); err != nil {
		return fmt.Errorf("ipc: send virtual: %w", err)
	}
	return nil
}

// virtualMessages encodes x: the header, then one message per piece, a
// POSIX piece's with its descriptor. A malformed x is ErrProtocol, a
// piece without its handle gpu.ErrInvalidValue.
func virtualMessages(x mr.VirtualExport) ([]message, error) {
	if err := checkExport(x); err != nil {
		return nil, err
	}
	msgs := make([]message, 0, 1+len(x.Pieces))
	h := make([]byte, virtualHeaderLen)
	copy(h, virtualMagic)
	for i, w := range []uint64{x.Span, x.Start, x.Size, uint64(len(x.Pieces))} {
		binary.LittleEndian.PutUint64(h[8+8*i:], w)
	}
	msgs = append(msgs, message{b: h})
	for i, pc := range x.Pieces {
		b := make([]byte, virtualPieceLen)
		binary.LittleEndian.PutUint64(b[0:], pc.Offset)
		binary.LittleEndian.PutUint64(b[8:], pc.Size)
		binary.LittleEndian.PutUint32(b[16:], uint32(pc.Handle.Type))
		switch {
		case pc.Handle.Type == gpu.HandlePOSIX && pc.Handle.File != nil:
			msgs = append(msgs, message{b: b, file: pc.Handle.File})
		case pc.Handle.Type == gpu.HandleFabric:
			copy(b[20:], pc.Handle.Fabric[:])
			msgs = append(msgs, message{b: b})
		default:
			return nil, fmt.Errorf("piece %d: handle type %#x without its handle: %w", i, int32(pc.Handle.Type), gpu.ErrInvalidValue)
		}
	}
	return msgs, nil
}

// RecvVirtual reads an export SendVirtual wrote on c. The descriptors are
// the caller's (x.Close once imported). ctx bounds the reads.
func RecvVirtual(ctx context.Context, c *net.UnixConn) (mr.VirtualExport, error) {
	defer deadlineFor(ctx, c)()
	x, err := readVirtual(c)
	if err != nil {
		return x, ctxErr(ctx, fmt.Errorf("ipc: receive virtual: %w", err))
	}
	return x, nil
}

// readVirtual reads an export from c. On error, every descriptor received
// with it is closed already.
func readVirtual(c *net.UnixConn) (x mr.VirtualExport, err error) {
	defer func() {
		if err != nil {
			err = errors.Join(err, x.Close())
			x = mr.VirtualExport{}
		}
	}()
	h := make([]byte, virtualHeaderLen)
	if _, err := recv(c, h, true); err != nil {
		return x, fmt.Errorf("header: %w", err)
	}
	if string(h[:8]) != virtualMagic {
		return x, fmt.Errorf("not an export's header: %w", ErrProtocol)
	}
	x.Span = binary.LittleEndian.Uint64(h[8:])
	x.Start = binary.LittleEndian.Uint64(h[16:])
	x.Size = binary.LittleEndian.Uint64(h[24:])
	n := binary.LittleEndian.Uint64(h[32:])
	if n == 0 || n > maxVirtualPieces {
		return x, fmt.Errorf("%d pieces: %w", n, ErrProtocol)
	}
	for i := range int(n) {
		b := make([]byte, virtualPieceLen)
		f, err := recv(c, b, true)
		if err != nil {
			return x, fmt.Errorf("piece %d: %w", i, err)
		}
		pc := mr.VirtualPiece{Offset: binary.LittleEndian.Uint64(b[0:]), Size: binary.LittleEndian.Uint64(b[8:])}
		pc.Handle.Type = gpu.HandleType(binary.LittleEndian.Uint32(b[16:]))
		pc.Handle.File = f
		copy(pc.Handle.Fabric[:], b[20:])
		x.Pieces = append(x.Pieces, pc)
		if (pc.Handle.Type == gpu.HandlePOSIX) != (f != nil) || (pc.Handle.Type != gpu.HandlePOSIX && pc.Handle.Type != gpu.HandleFabric) {
			return x, fmt.Errorf("piece %d: handle type %#x with %v descriptor: %w", i, int32(pc.Handle.Type), f != nil, ErrProtocol)
		}
		if pc.Handle.Type == gpu.HandlePOSIX && pc.Handle.Fabric != [64]byte{} {
			return x, fmt.Errorf("piece %d: a POSIX piece with fabric handle bytes: %w", i, ErrProtocol)
		}
	}
	if err := checkExport(x); err != nil {
		return x, err
	}
	return x, nil
}
