package sanitize_test

import (
	"testing"

	"github.com/streamalloc/streamalloc/gpu/gputest"
	_ "github.com/streamalloc/streamalloc/gpu/kernels" // registers the Go kernels
	"github.com/streamalloc/streamalloc/gpu/sim"
	"github.com/streamalloc/streamalloc/sanitize"
)

// The instrumented device passes the managed-memory and host-pool suite:
// it forwards both optional interfaces with its streams unwrapped.
func TestManagedThroughSanitizer(t *testing.T) {
	raw, err := sim.New(sim.Config{}).Device(0)
	must(t, err)
	var reports int
	z := sanitize.New(sanitize.Options{OnReport: func(*sanitize.Report) { reports++ }})
	gputest.RunManaged(t, z.Device(raw))
	if reports != 0 {
		t.Errorf("%d sanitizer reports on correctly ordered work", reports)
	}
}
