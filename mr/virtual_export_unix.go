//go:build unix

package mr

import (
	"os"
	"syscall"
)

// dupFile returns a new descriptor of f's open file, closed on exec (so a
// child process started meanwhile does not inherit it and keep the memory
// it names alive).
func dupFile(f *os.File) (*os.File, error) {
	raw, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var nfd int
	var derr error
	cerr := raw.Control(func(fd uintptr) {
		syscall.ForkLock.RLock()
		defer syscall.ForkLock.RUnlock()
		if nfd, derr = syscall.Dup(int(fd)); derr == nil {
			syscall.CloseOnExec(nfd)
		}
	})
	if cerr != nil {
		return nil, cerr
	}
	if derr != nil {
		return nil, derr
	}
	return os.NewFile(uintptr(nfd), f.Name()), nil
}
