//go:build unix

package ipc

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
)

// TestHelloRefusals: Accept refuses a hello whose pool it cannot import,
// each with its error, and keeps nothing of it (conn stays the caller's,
// no descriptor is left open): a fabric handle that names no pool, the
// fabric handle of a pool destroyed since its export, a fabric handle to
// an importer without an IMEX channel (the driver's ErrNotSupported), a
// fabric hello with a descriptor attached and a POSIX hello without one
// or with fabric handle bytes (ErrProtocol).
func TestHelloRefusals(t *testing.T) {
	junk := [64]byte{'N', 'O', 'T', 'A', 'P', 'O', 'O', 'L'}
	destroyed := func(t *testing.T, exp gpu.Device) [64]byte {
		x, _ := gpu.IPCOf(exp)
		p, err := x.NewExportableMemPool(gpu.HandleFabric)
		if err != nil {
			t.Fatal(err)
		}
		sh, err := x.ExportMemPool(p, gpu.HandleFabric)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Destroy(); err != nil {
			t.Fatal(err)
		}
		return sh.Fabric
	}
	for _, c := range []struct {
		name   string
		noIMEX bool // the importer has no IMEX channel
		ht     gpu.HandleType
		pool   func(t *testing.T, exp gpu.Device) [64]byte // the fabric handle in a
		file   bool                                        // a descriptor attached
		want   error
	}{
		{"a fabric handle of no pool", false, gpu.HandleFabric, func(*testing.T, gpu.Device) [64]byte { return junk }, false, gpu.ErrInvalidValue},
		{"a fabric handle of a destroyed pool", false, gpu.HandleFabric, destroyed, false, gpu.ErrInvalidValue},
		{"a fabric handle to an importer without an IMEX channel", true, gpu.HandleFabric, destroyed, false, gpu.ErrNotSupported},
		{"a fabric hello with a descriptor", false, gpu.HandleFabric, destroyed, true, ErrProtocol},
		{"a POSIX hello without a descriptor", false, gpu.HandlePOSIX, nil, false, ErrProtocol},
		{"a POSIX hello with fabric handle bytes", false, gpu.HandlePOSIX, destroyed, true, ErrProtocol},
	} {
		t.Run(c.name, func(t *testing.T) {
			fds := openFDs(t)
			cfg := sim.Config{Capacity: 1 << 30, IPCHandleTypes: gpu.HandlePOSIX | gpu.HandleFabric}
			exp, _ := sim.New(cfg).Device(0)
			cfg.NoIMEXChannel = c.noIMEX
			imp, _ := sim.New(cfg).Device(0)
			x, _ := gpu.IPCOf(exp)
			ev, err := x.NewIPCEvent()
			if err != nil {
				t.Fatal(err)
			}
			defer ev.Destroy()
			evh, err := x.ExportEvent(ev)
			if err != nil {
				t.Fatal(err)
			}
			hello := frame{kind: kindHello, handle: int32(c.ht), b: evh}
			if c.pool != nil {
				hello.a = c.pool(t, exp)
			}
			ce, ci := unixPair(t)
			defer ce.Close()
			defer ci.Close()
			m := message{b: hello.marshal()}
			if c.file {
				f, err := os.Open(os.DevNull)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				m.file = f
			}
			if _, err := writeMessage(ce, m); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			im, err := Accept(ctx, imp, ci)
			if !errors.Is(err, c.want) {
				t.Errorf("Accept: %v, want %v", err, c.want)
			}
			if im != nil {
				t.Fatal("Accept returned an importer with its error")
			}
			// conn is still the caller's: it reads the end of the
			// exporter's side, and no hello-back came.
			ce.Close()
			if n, err := ci.Read(make([]byte, 1)); n != 0 || err == nil {
				t.Errorf("the importer's socket after the refusal: %d bytes, %v; want its end", n, err)
			}
			ci.Close()
			if m.file != nil {
				m.file.Close()
			}
			if n := openFDs(t); n != fds {
				t.Errorf("%d descriptors open, %d before", n, fds)
			}
		})
	}
}

// unixPair is a connected pair of Unix stream sockets.
func unixPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}
