//go:build !race

// Without -race the annotations of race_on.go are no-ops.

package sim

import "unsafe"

const raceEnabled = false

func raceDisable()                      {}
func raceEnable()                       {}
func raceAcquire(p unsafe.Pointer)      {}
func raceRelease(p unsafe.Pointer)      {}
func raceReleaseMerge(p unsafe.Pointer) {}
func raceRead(b []byte)                 {}
func raceWrite(b []byte)                {}
