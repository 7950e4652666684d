// Carrying an mr.VirtualExport over a Unix stream socket: a header frame,
// then one frame per piece, a POSIX piece's descriptor attached
// (SCM_RIGHTS, fd.go). All integers are little-endian.
//
//	header: "SAVIRT01", span, start, size, pieces (uint64 each)   40 bytes
//	piece:  offset, size (uint64), handle type (int32), fabric [64]byte  84 bytes
//
// The receiver refuses a malformed message (ErrProtocol) and closes every
// descriptor it received with it, so nothing leaks.

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
// ctx bounds the writes; a write cut short leaves the stream unusable.
func SendVirtual(ctx context.Context, c *net.UnixConn, x mr.VirtualExport) error {
	if err := checkExport(x); err != nil {
		return fmt.Errorf("ipc: send virtual: %w", err)
	}
	defer deadlineFor(ctx, c)()
	h := make([]byte, virtualHeaderLen)
	copy(h, virtualMagic)
	for i, w := range []uint64{x.Span, x.Start, x.Size, uint64(len(x.Pieces))} {
		binary.LittleEndian.PutUint64(h[8+8*i:], w)
	}
	if _, err := c.Write(h); err != nil {
		return ctxErr(ctx, fmt.Errorf("ipc: send virtual: header: %w", lostIfEOF(err)))
	}
	for i, pc := range x.Pieces {
		b := make([]byte, virtualPieceLen)
		binary.LittleEndian.PutUint64(b[0:], pc.Offset)
		binary.LittleEndian.PutUint64(b[8:], pc.Size)
		binary.LittleEndian.PutUint32(b[16:], uint32(pc.Handle.Type))
		var err error
		switch {
		case pc.Handle.Type == gpu.HandlePOSIX && pc.Handle.File != nil:
			err = SendFile(c, b, pc.Handle.File)
		case pc.Handle.Type == gpu.HandleFabric:
			copy(b[20:], pc.Handle.Fabric[:])
			_, err = c.Write(b)
		default:
			return fmt.Errorf("ipc: send virtual: piece %d: handle type %#x without its handle: %w", i, int32(pc.Handle.Type), gpu.ErrInvalidValue)
		}
		if err != nil {
			return ctxErr(ctx, fmt.Errorf("ipc: send virtual: piece %d: %w", i, lostIfEOF(err)))
		}
	}
	return nil
}

// RecvVirtual reads an export SendVirtual wrote on c. The descriptors are
// the caller's (x.Close once imported). ctx bounds the reads.
func RecvVirtual(ctx context.Context, c *net.UnixConn) (x mr.VirtualExport, err error) {
	defer deadlineFor(ctx, c)()
	defer func() {
		if err != nil {
			err = errors.Join(ctxErr(ctx, err), x.Close())
			x = mr.VirtualExport{}
		}
	}()
	h := make([]byte, virtualHeaderLen)
	if _, err := recv(c, h, true); err != nil {
		return x, fmt.Errorf("ipc: receive virtual: header: %w", err)
	}
	if string(h[:8]) != virtualMagic {
		return x, fmt.Errorf("ipc: receive virtual: not an export's header: %w", ErrProtocol)
	}
	x.Span = binary.LittleEndian.Uint64(h[8:])
	x.Start = binary.LittleEndian.Uint64(h[16:])
	x.Size = binary.LittleEndian.Uint64(h[24:])
	n := binary.LittleEndian.Uint64(h[32:])
	if n == 0 || n > maxVirtualPieces {
		return x, fmt.Errorf("ipc: receive virtual: %d pieces: %w", n, ErrProtocol)
	}
	for i := range int(n) {
		b := make([]byte, virtualPieceLen)
		f, err := recv(c, b, true)
		if err != nil {
			return x, fmt.Errorf("ipc: receive virtual: piece %d: %w", i, err)
		}
		pc := mr.VirtualPiece{Offset: binary.LittleEndian.Uint64(b[0:]), Size: binary.LittleEndian.Uint64(b[8:])}
		pc.Handle.Type = gpu.HandleType(binary.LittleEndian.Uint32(b[16:]))
		pc.Handle.File = f
		copy(pc.Handle.Fabric[:], b[20:])
		x.Pieces = append(x.Pieces, pc)
		if (pc.Handle.Type == gpu.HandlePOSIX) != (f != nil) || (pc.Handle.Type != gpu.HandlePOSIX && pc.Handle.Type != gpu.HandleFabric) {
			return x, fmt.Errorf("ipc: receive virtual: piece %d: handle type %#x with %v descriptor: %w", i, int32(pc.Handle.Type), f != nil, ErrProtocol)
		}
	}
	if err := checkExport(x); err != nil {
		return x, fmt.Errorf("ipc: receive virtual: %w", err)
	}
	return x, nil
}
