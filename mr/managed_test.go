package mr_test

import (
	"errors"
	"testing"

	"github.com/streamalloc/streamalloc/internal/testdev"
	"github.com/streamalloc/streamalloc/mr"
)

// A managed request larger than the device is refused before the driver
// sees it (the driver would oversubscribe it), on the simulator and on
// the GPU alike, and the resource keeps working.
func TestManagedRefusesMoreThanTheDevice(t *testing.T) {
	dev := testdev.Device(t)
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	m := mr.NewManaged(dev)
	total := dev.Properties().TotalMemory
	_, err = m.Allocate(int(total)+1, s)
	var oom *mr.OutOfMemoryError
	if !errors.Is(err, mr.ErrOutOfMemory) || !errors.As(err, &oom) {
		t.Fatalf("Allocate(total+1) = %v, want an *OutOfMemoryError", err)
	}
	if oom.Limit != total || oom.Requested != int(total)+1 || oom.Resource != "managed" || oom.Err != nil {
		t.Errorf("OutOfMemoryError = %+v, want Limit %d and the request", *oom, total)
	}
	if u := m.Usage(); u.Used != 0 || u.Reserved != 0 {
		t.Errorf("usage after refusal = %+v", u)
	}
	p, err := m.Allocate(1<<20, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Deallocate(p, 1<<20, s); err != nil {
		t.Fatal(err)
	}
}
