//go:build unix

package ipc_test

import (
	"errors"
	"io"
	"os"
	"syscall"
	"testing"

	"github.com/streamalloc/streamalloc/ipc"
)

// TestSendRecvFile: a descriptor sent with a message reaches the other end
// as a descriptor of the same open file, and the message arrives whole.
func TestSendRecvFile(t *testing.T) {
	a, b := socketPair(t)
	r, w, err := os.Pipe()
	must(t, err)
	defer r.Close()
	defer w.Close()
	msg := []byte("hello with a descriptor")
	must(t, ipc.SendFile(a, msg, w))
	got := make([]byte, len(msg))
	f, err := ipc.RecvFile(b, got)
	must(t, err)
	defer f.Close()
	if string(got) != string(msg) {
		t.Fatalf("message %q, want %q", got, msg)
	}
	if _, err := f.Write([]byte("through it")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	f.Close()
	back, err := io.ReadAll(r)
	must(t, err)
	if string(back) != "through it" {
		t.Fatalf("read %q through the received descriptor", back)
	}
}

// TestRecvFileRefusals: a message without a descriptor, or with two, is
// ErrProtocol and leaves no descriptor open; a closed peer is ErrPeerLost;
// bad arguments are refused before anything is sent.
func TestRecvFileRefusals(t *testing.T) {
	a, b := socketPair(t)
	if _, err := a.Write([]byte("no descriptor")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 13)
	if _, err := ipc.RecvFile(b, buf); !errors.Is(err, ipc.ErrProtocol) {
		t.Errorf("a message without a descriptor: %v, want ipc.ErrProtocol", err)
	}

	r, w, _ := os.Pipe()
	defer r.Close()
	defer w.Close()
	before := openDescriptors(t)
	rights := syscall.UnixRights(int(r.Fd()), int(w.Fd()))
	if _, _, err := a.WriteMsgUnix([]byte("x"), rights, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ipc.RecvFile(b, make([]byte, 1)); !errors.Is(err, ipc.ErrProtocol) {
		t.Errorf("a message with two descriptors: %v, want ipc.ErrProtocol", err)
	}
	if after := openDescriptors(t); after != before {
		t.Errorf("%d descriptors open before, %d after refusing two", before, after)
	}

	if err := ipc.SendFile(a, nil, w); !errors.Is(err, ipc.ErrProtocol) {
		t.Errorf("SendFile of no bytes: %v, want ipc.ErrProtocol", err)
	}
	if err := ipc.SendFile(a, []byte("x"), nil); !errors.Is(err, ipc.ErrProtocol) {
		t.Errorf("SendFile of no file: %v, want ipc.ErrProtocol", err)
	}
	a.Close()
	if _, err := ipc.RecvFile(b, make([]byte, 1)); !errors.Is(err, ipc.ErrPeerLost) {
		t.Errorf("RecvFile from a closed peer: %v, want ipc.ErrPeerLost", err)
	}
}

// openDescriptors counts this process's open descriptors.
func openDescriptors(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}
