// Conformance of pools exportable as fabric handles (gpu.IPC with
// gpu.HandleFabric). A device may offer fabric handles to a process that
// may not use them (no IMEX channel); a backend must then refuse the pool
// with gpu.ErrNotPermitted and make nothing, because driver 580 makes such
// a pool, refuses its export and ends the process when it is destroyed.
// One device suffices: the case runs in one process on the card.

package gputest

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu"
)

// IMEX says what RunIPCFabric expects of the process's IMEX channel.
type IMEX int

const (
	// IMEXUnknown accepts either answer: the pool works, or it is
	// refused with gpu.ErrNotPermitted (a card on a machine the test
	// does not configure).
	IMEXUnknown IMEX = iota
	// IMEXChannel: the process has a channel, and fabric pools work.
	IMEXChannel
	// IMEXNone: the process has none, and fabric pools are refused.
	IMEXNone
)

// RunIPCFabric runs, as subtest IPCFabricPool of t, the case of pools
// exportable as fabric (alone, and with POSIX descriptors where the device
// offers both) on dev; it skips where dev offers no fabric handles. Each
// pool either works (made, an allocation of it exported, the pool exported
// as 64 bytes with no descriptor, destroyed) or is refused with an error
// matching gpu.ErrNotPermitted, a nil pool, and the device's free memory
// unchanged; both pools get the same answer, and channel says which one
// must come.
func RunIPCFabric(t *testing.T, dev gpu.Device, channel IMEX) {
	t.Helper()
	t.Run("IPCFabricPool", func(t *testing.T) {
		x := ipcOf(t, dev)
		offered, err := x.ExportHandleTypes()
		must(t, err)
		if offered&gpu.HandleFabric == 0 {
			t.Skipf("the device offers handle types %#x, no fabric", int32(offered))
		}
		types := []gpu.HandleType{gpu.HandleFabric}
		if offered&gpu.HandlePOSIX != 0 {
			types = append(types, gpu.HandlePOSIX|gpu.HandleFabric)
		}
		must(t, dev.Synchronize())
		free0, _, err := dev.MemGetInfo()
		must(t, err)
		refused := 0
		for _, ht := range types {
			pool, err := x.NewExportableMemPool(ht)
			if err != nil {
				t.Logf("a pool exportable as %#x: refused: %v", int32(ht), err)
				wantErr(t, "NewExportableMemPool as fabric, refused", err, gpu.ErrNotPermitted)
				if pool != nil {
					t.Errorf("the refused pool of handle types %#x came back with its error", int32(ht))
				}
				if channel == IMEXChannel {
					t.Errorf("a pool exportable as %#x refused in a process with an IMEX channel: %v", int32(ht), err)
				}
				refused++
				continue
			}
			if channel == IMEXNone {
				t.Errorf("a pool exportable as %#x made in a process without an IMEX channel", int32(ht))
			}
			fabricPoolWorks(t, dev, x, pool)
		}
		if refused != 0 && refused != len(types) {
			t.Errorf("%d of %d fabric pools refused: the device answered differently for the same process", refused, len(types))
		}
		if refused == len(types) {
			if free, _, err := dev.MemGetInfo(); err != nil || free != free0 {
				t.Errorf("free memory %d (%v) after the refusals, %d before", free, err, free0)
			}
		}
	})
}

// fabricPoolWorks allocates from pool, exports the allocation and the pool
// as fabric, and destroys the pool.
func fabricPoolWorks(t *testing.T, dev gpu.Device, x gpu.IPC, pool gpu.MemPool) {
	t.Helper()
	s := newStream(t, dev)
	p, err := dev.MallocFromPoolAsync(4096, pool, s)
	must(t, err)
	if _, err := x.ExportPointer(p); err != nil {
		t.Errorf("ExportPointer of a fabric pool's allocation: %v", err)
	}
	sh, err := x.ExportMemPool(pool, gpu.HandleFabric)
	if err != nil {
		t.Errorf("ExportMemPool as fabric: %v", err)
	} else if sh.Type != gpu.HandleFabric || sh.File != nil || sh.Fabric == [64]byte{} {
		t.Errorf("ExportMemPool as fabric: %+v, want 64 bytes and no descriptor", sh)
	}
	must(t, dev.FreeAsync(p, s))
	must(t, s.Synchronize())
	must(t, pool.Destroy())
}
