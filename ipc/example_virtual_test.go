//go:build unix

package ipc_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/ipc"
	"github.com/streamalloc/streamalloc/mr"
)

// An exporter shares memory of an mr.Virtual with an importer over a Unix
// socket: the export's descriptors travel with SendVirtual, and two
// interprocess events keep the stream order (the importer reads after the
// exporter's write; the exporter frees after the importer's). The two
// simulated Backends stand for two processes on one GPU.
func ExampleImportVirtual() {
	expDev, _ := sim.New(sim.Config{}).Device(0)
	impDev, _ := sim.New(sim.Config{}).Device(0)
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ipc-example")
	defer os.RemoveAll(dir)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "sock"), Net: "unix"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()

	// The importing process.
	done := make(chan error)
	go func() {
		done <- func() error {
			conn, err := net.DialUnix("unix", nil, ln.Addr().(*net.UnixAddr))
			if err != nil {
				return err
			}
			defer conn.Close()
			var ready gpu.IPCEventHandle
			if _, err := io.ReadFull(conn, ready[:]); err != nil {
				return err
			}
			x, err := ipc.RecvVirtual(ctx, conn)
			if err != nil {
				return err
			}
			m, err := ipc.ImportVirtual(impDev, x)
			x.Close() // the descriptors: mapped now
			if err != nil {
				return err
			}
			xi, _ := gpu.IPCOf(impDev)
			re, _ := xi.ImportEvent(ready)
			defer re.Destroy()
			s, _ := impDev.NewStream()
			s.WaitEvent(re) // after the exporter's write
			b := make([]byte, 5)
			impDev.CopyDtoHAsync(b, m.Ptr(), s)
			s.Synchronize()
			fmt.Printf("importer read %q\n", b)
			impDev.CopyHtoDAsync(m.Ptr(), []byte("world"), s)
			used, _ := xi.NewIPCEvent()
			defer used.Destroy()
			used.Record(s)
			h, _ := xi.ExportEvent(used)
			conn.Write(h[:])
			s.Synchronize() // Close unmaps: the work must be done
			if err := m.Close(); err != nil {
				return err
			}
			_, err = conn.Read(make([]byte, 1)) // the exporter has waited
			return err
		}()
	}()

	// The exporting process.
	v, err := mr.NewVirtual(expDev, mr.VirtualOptions{ReserveSize: 64 << 20, HandleTypes: gpu.HandlePOSIX})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer v.Close()
	s, _ := expDev.NewStream()
	p, _ := v.Allocate(5, s)
	expDev.CopyHtoDAsync(p, []byte("hello"), s)
	xe, _ := gpu.IPCOf(expDev)
	ready, _ := xe.NewIPCEvent()
	defer ready.Destroy()
	ready.Record(s)
	rh, _ := xe.ExportEvent(ready)
	x, err := v.Export(p, 5, gpu.HandlePOSIX)
	if err != nil {
		fmt.Println(err)
		return
	}
	conn, _ := ln.AcceptUnix()
	defer conn.Close()
	conn.Write(rh[:])
	if err := ipc.SendVirtual(ctx, conn, x); err != nil {
		fmt.Println(err)
		return
	}
	x.Close() // sent: the descriptors are the importer's now
	var uh gpu.IPCEventHandle
	io.ReadFull(conn, uh[:])
	used, _ := xe.ImportEvent(uh)
	defer used.Destroy()
	s.WaitEvent(used) // after the importer's last use
	b := make([]byte, 5)
	expDev.CopyDtoHAsync(b, p, s)
	s.Synchronize()
	conn.Write([]byte{1})
	fmt.Printf("exporter read %q\n", b)
	fmt.Println("free:", v.Deallocate(p, 5, s))
	if err := <-done; err != nil {
		fmt.Println(err)
	}
	// Output:
	// importer read "hello"
	// exporter read "world"
	// free: <nil>
}
