// The importer's process, as Linux tells it (SO_PEERCRED), and waiting for
// it to finish exiting: a process is done with its descriptors, the
// driver's included, once it is a zombie or gone.

package ipc

import (
	"bytes"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"
)

// peerPID is the process at the other end of c, 0 if unknown or this one.
func peerPID(c *net.UnixConn) int {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	raw.Control(func(fd uintptr) {
		if u, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			pid = int(u.Pid)
		}
	})
	if pid == os.Getpid() {
		return 0
	}
	return pid
}

// maxExitWait bounds waitExited: a peer that closed its socket and lives
// on is not dying, and its loans are taken back after this long.
const maxExitWait = 30 * time.Second

// waitExited returns once pid is a zombie or gone, or after maxExitWait.
func waitExited(pid int) {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	deadline := time.Now().Add(maxExitWait)
	for d := 100 * time.Microsecond; time.Now().Before(deadline); d = min(2*d, 10*time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil {
			return // gone
		}
		// "pid (comm) S ...": the state follows the last ')'.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
			return
		}
		time.Sleep(d)
	}
}
