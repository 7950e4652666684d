//go:build !linux

package osthread

func id() (int, bool) { return 0, false }
