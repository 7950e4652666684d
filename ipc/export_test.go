package ipc

// SetCommitHook sets the hook run when a handshake is done, before Serve
// or Accept commits; nil removes it.
func SetCommitHook(f func(side string)) { testHookCommit = f }
