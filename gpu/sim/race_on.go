//go:build race

// Race-detector annotations for builds with -race. See race_off.go for the
// no-op versions and doc.go for why the simulator needs them.

package sim

import (
	"runtime"
	"unsafe"
)

// raceEnabled reports whether the binary was built with -race.
const raceEnabled = true

// raceDisable and raceEnable bracket the simulator's own synchronization
// so that it creates no happens-before edges.
func raceDisable() { runtime.RaceDisable() }
func raceEnable()  { runtime.RaceEnable() }

// raceAcquire and raceRelease add the edges the driver does guarantee.
func raceAcquire(p unsafe.Pointer) { runtime.RaceAcquire(p) }
func raceRelease(p unsafe.Pointer) { runtime.RaceRelease(p) }

// raceReleaseMerge is raceRelease that keeps what earlier releases of p
// released: an acquire of p orders after all of them.
func raceReleaseMerge(p unsafe.Pointer) { runtime.RaceReleaseMerge(p) }

// raceRead and raceWrite tell the detector about accesses made by
// uninstrumented (//go:norace) code.
func raceRead(b []byte) {
	if len(b) > 0 {
		runtime.RaceReadRange(unsafe.Pointer(unsafe.SliceData(b)), len(b))
	}
}

func raceWrite(b []byte) {
	if len(b) > 0 {
		runtime.RaceWriteRange(unsafe.Pointer(unsafe.SliceData(b)), len(b))
	}
}
