// Access: how a use touches a buffer's bytes. The tracking rules of
// track.go depend only on whether the use writes.

package buf

import "strconv"

// Access says how a use touches a buffer: reads, writes, or both.
type Access uint8

// The three accesses. ReadWrite is tracked as a write (a write waits on
// everything a read would).
const (
	Read Access = 1 << iota
	Write
	ReadWrite = Read | Write
)

// String is "read", "write", "read-write" or "Access(n)".
func (a Access) String() string {
	switch a {
	case Read:
		return "read"
	case Write:
		return "write"
	case ReadWrite:
		return "read-write"
	}
	return "Access(" + strconv.Itoa(int(a)) + ")"
}

// Writes reports whether a includes a write.
func (a Access) Writes() bool { return a&Write != 0 }

func (a Access) valid() bool { return a == Read || a == Write || a == ReadWrite }
