package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/streamalloc/streamalloc/trace"
)

// openPTY returns the two ends of a new pseudo-terminal: what is written
// to tty (a terminal, as term.IsTerminal sees it) can be read from ptm.
func openPTY(t *testing.T) (ptm, tty *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptm.Close() })
	var unlock int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, ptm.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
		t.Fatalf("unlock the pty: %v", errno)
	}
	var n uint32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, ptm.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); errno != 0 {
		t.Fatalf("pty number: %v", errno)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return ptm, tty
}

// On a terminal the replay draws a progress bar on standard error, named
// by the trace and the resource; the results still go to standard output
// alone. (TestReplayGzipTableAndLog checks the other half: nothing on a
// standard error that is not a terminal.)
func TestProgressBarOnTerminal(t *testing.T) {
	ptm, tty := openPTY(t)
	got := make(chan string)
	go func() {
		var b bytes.Buffer
		io.Copy(&b, ptm) // ends with EIO once the last tty fd is closed
		got <- b.String()
	}()
	// Long enough for the replay to report progress before its end
	// (every 65536 events): a bar that only ever sees 100% is cleared
	// before it is drawn.
	const pair = "1,10:00:00.000001,allocate,0x1000,256,0x0\n1,10:00:00.000002,free,0x1000,256,0x0\n"
	p := writeFile(t, "t.csv", "Thread,Time,Action,Pointer,Size,Stream\n"+strings.Repeat(pair, 70_000))
	var out bytes.Buffer
	err := runReplay(context.Background(), &out, tty, "sim", replayFlags{resources: "direct,pool", upstream: "async", timeScale: 1, maxExpansion: trace.DefaultMaxExpansion}, []string{p})
	tty.Close()
	if err != nil {
		t.Fatal(err)
	}
	bar := <-got
	for _, want := range []string{p + " [direct]", p + " [pool]", "%"} {
		if !strings.Contains(bar, want) {
			t.Errorf("terminal output lacks %q:\n%q", want, bar)
		}
	}
	// The bar (its description names the trace and resource) is not on
	// standard output, the table is.
	if strings.Contains(out.String(), " [direct]") || strings.Contains(out.String(), " [pool]") || !strings.Contains(out.String(), "peak reserved") {
		t.Errorf("standard output:\n%s", out.String())
	}
}
