//go:build unix

package ipc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/ipc"
	"github.com/streamalloc/streamalloc/mr"
)

// An exporter lends memory of an mr.Virtual to an importer over a Unix
// socket, with the same Link, Loan and Import as a driver pool's
// allocations: the pieces under the range travel with the lend, the
// importer maps them, and its Release unmaps them once its stream has
// finished with them, without waiting on the host. The two simulated
// Backends stand for two processes on one GPU.
func ExampleNewVirtualExporter() {
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

	// The importing process. It gives the loan back once the exporter
	// has tried to free it (checked), so that the output is the same on
	// every run.
	done := make(chan error)
	checked := make(chan struct{})
	go func() {
		conn, err := net.DialUnix("unix", nil, ln.Addr().(*net.UnixAddr))
		if err != nil {
			done <- err
			return
		}
		im, err := ipc.Accept(ctx, impDev, conn)
		if err != nil {
			done <- err
			return
		}
		s, _ := impDev.NewStream()
		x, err := im.Receive(ctx, s)
		if err != nil {
			done <- err
			return
		}
		b := make([]byte, 5)
		impDev.CopyDtoHAsync(b, x.Ptr(), s) // waits for the exporter's writes
		s.Synchronize()
		fmt.Printf("importer read %q\n", b)
		impDev.CopyHtoDAsync(x.Ptr(), []byte("world"), s)
		<-checked
		x.Release(s) // given back now, unmapped once the copy has run
		done <- im.Close()
	}()

	// The exporting process: a Virtual whose memory is exportable as
	// POSIX descriptors, and an Exporter over it.
	v, err := mr.NewVirtual(expDev, mr.VirtualOptions{ReserveSize: 64 << 20, HandleTypes: gpu.HandlePOSIX})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer v.Close()
	e, err := ipc.NewVirtualExporter(v, ipc.VirtualExporterOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	conn, _ := ln.AcceptUnix()
	link, err := e.Serve(ctx, conn)
	if err != nil {
		fmt.Println(err)
		return
	}
	s, _ := expDev.NewStream()
	p, _ := e.Allocate(5, s)
	expDev.CopyHtoDAsync(p, []byte("hello"), s)
	loan, err := link.Lend(ctx, p, 5, s)
	if err != nil {
		fmt.Println(err)
		return
	}
	refused := e.Deallocate(p, 5, s)
	close(checked)
	if err := loan.Wait(ctx); err != nil { // given back: s now waits on the importer
		fmt.Println(err)
		return
	}
	fmt.Println("free refused while lent:", errors.Is(refused, ipc.ErrLent))
	b := make([]byte, 5)
	expDev.CopyDtoHAsync(b, p, s)
	s.Synchronize()
	fmt.Printf("exporter read %q\n", b)
	fmt.Println("free:", e.Deallocate(p, 5, s))
	if err := <-done; err != nil {
		fmt.Println(err)
	}
	<-link.Done()
	fmt.Println("close:", e.Close())
	// Output:
	// importer read "hello"
	// free refused while lent: true
	// exporter read "world"
	// free: <nil>
	// close: <nil>
}
