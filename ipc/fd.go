//go:build unix

// Passing a file descriptor over a Unix socket (SCM_RIGHTS): how a pool
// exported as a POSIX handle reaches another process.
//
// The descriptor travels as ancillary data with the first bytes of a
// message; the receiver gets a new descriptor of the same open file, which
// it owns (the sender keeps and closes its own). A message that carries no
// descriptor, more than one, or one cut short by a too-small control
// buffer is refused, and every descriptor received with it is closed, so
// a malformed message never leaks one.

package ipc

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

// SendFile writes msg on c with f's descriptor attached. f stays open.
func SendFile(c *net.UnixConn, msg []byte, f *os.File) error {
	if f == nil {
		return fmt.Errorf("ipc: send descriptor: nil file: %w", ErrProtocol)
	}
	if len(msg) == 0 {
		return fmt.Errorf("ipc: send descriptor: a descriptor travels with at least one byte: %w", ErrProtocol)
	}
	raw, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("ipc: send descriptor: %w", err)
	}
	var werr error
	cerr := raw.Control(func(fd uintptr) {
		var n int
		n, _, werr = c.WriteMsgUnix(msg, syscall.UnixRights(int(fd)), nil)
		if werr == nil && n < len(msg) {
			_, werr = c.Write(msg[n:])
		}
	})
	if cerr != nil {
		return fmt.Errorf("ipc: send descriptor: %w", cerr)
	}
	if werr != nil {
		return fmt.Errorf("ipc: send descriptor: %w", werr)
	}
	return nil
}

// writeMessage writes m.b on c, with m.file's descriptor attached if it
// has one, and returns how many bytes went.
func writeMessage(c *net.UnixConn, m message) (int, error) {
	if m.file == nil {
		return c.Write(m.b)
	}
	raw, err := m.file.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var werr error
	cerr := raw.Control(func(fd uintptr) {
		n, _, werr = c.WriteMsgUnix(m.b, syscall.UnixRights(int(fd)), nil)
		if werr == nil && n < len(m.b) {
			var k int
			k, werr = c.Write(m.b[n:])
			n += k
		}
	})
	if cerr != nil {
		return n, cerr
	}
	return n, werr
}

// RecvFile reads len(msg) bytes from c into msg and the one descriptor
// sent with them, as a file the caller owns.
func RecvFile(c *net.UnixConn, msg []byte) (*os.File, error) {
	return recv(c, msg, false)
}

// recv is RecvFile; with optional, a message without a descriptor is read
// whole and gives a nil file.
func recv(c *net.UnixConn, msg []byte, optional bool) (*os.File, error) {
	if len(msg) == 0 {
		return nil, fmt.Errorf("ipc: receive descriptor: empty message: %w", ErrProtocol)
	}
	oob := make([]byte, syscall.CmsgSpace(4*4)) // room to see (and close) a few extra
	n, oobn, flags, _, err := c.ReadMsgUnix(msg, oob)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("ipc: receive descriptor: %w", ErrPeerLost)
		}
		return nil, fmt.Errorf("ipc: receive descriptor: %w", err)
	}
	fds, perr := parseRights(oob[:oobn])
	closeAll := func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}
	switch {
	case perr != nil:
		closeAll()
		return nil, fmt.Errorf("ipc: receive descriptor: %v: %w", perr, ErrProtocol)
	case flags&syscall.MSG_CTRUNC != 0:
		closeAll()
		return nil, fmt.Errorf("ipc: receive descriptor: control data cut short: %w", ErrProtocol)
	case len(fds) > 1 || (len(fds) == 0 && !optional):
		closeAll()
		return nil, fmt.Errorf("ipc: receive descriptor: %d descriptors, want 1: %w", len(fds), ErrProtocol)
	}
	var f *os.File
	if len(fds) == 1 {
		f = os.NewFile(uintptr(fds[0]), "ipc-received")
	}
	fail := func(err error) (*os.File, error) {
		if f != nil {
			f.Close()
		}
		return nil, err
	}
	if n == 0 {
		return fail(fmt.Errorf("ipc: receive descriptor: %w", ErrPeerLost))
	}
	if _, err := io.ReadFull(c, msg[n:]); err != nil {
		return fail(fmt.Errorf("ipc: receive descriptor: the rest of the message: %w", lostIfEOF(err)))
	}
	return f, nil
}

// parseRights returns the descriptors of every SCM_RIGHTS message in oob.
func parseRights(oob []byte) ([]int, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range msgs {
		r, err := syscall.ParseUnixRights(&msgs[i])
		if err != nil {
			continue // not SCM_RIGHTS
		}
		fds = append(fds, r...)
	}
	return fds, nil
}

// lostIfEOF maps the end of the stream, and a write to a peer that is
// gone, to ErrPeerLost.
func lostIfEOF(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("%w (%v)", ErrPeerLost, err)
	}
	return err
}
