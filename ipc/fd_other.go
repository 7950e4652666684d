//go:build !unix

// Without Unix sockets there is no descriptor passing: a POSIX handle
// cannot travel, and the calls say so.

package ipc

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/streamalloc/streamalloc/gpu"
)

// SendFile is not available on this system.
func SendFile(c *net.UnixConn, msg []byte, f *os.File) error {
	return fmt.Errorf("ipc: send descriptor: no SCM_RIGHTS here: %w", gpu.ErrNotSupported)
}

// RecvFile is not available on this system.
func RecvFile(c *net.UnixConn, msg []byte) (*os.File, error) {
	return nil, fmt.Errorf("ipc: receive descriptor: no SCM_RIGHTS here: %w", gpu.ErrNotSupported)
}

func writeMessage(c *net.UnixConn, m message) (int, error) {
	if m.file != nil {
		return 0, fmt.Errorf("ipc: send descriptor: no SCM_RIGHTS here: %w", gpu.ErrNotSupported)
	}
	return c.Write(m.b)
}

func recv(c *net.UnixConn, msg []byte, optional bool) (*os.File, error) {
	if !optional {
		return RecvFile(c, msg)
	}
	if _, err := io.ReadFull(c, msg); err != nil {
		return nil, lostIfEOF(err)
	}
	return nil, nil
}

func lostIfEOF(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("%w (%v)", ErrPeerLost, err)
	}
	return err
}
