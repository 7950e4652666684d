//go:build !linux

package ipc

import "net"

// peerPID is unknown on this system: a lost importer's loans come back as
// soon as its connection ends.
func peerPID(*net.UnixConn) int { return 0 }

func waitExited(int) {}
