package mr_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestDependencies: a program that imports only the allocator links no
// pickle decoder and no chart library. Both belong to packages of their
// own (trace/torchsnap, report), which mr must not reach through the
// packages it imports (trace, for the logging adaptor's CSV writer). Nor
// does mr reach the layer above it (buf, sanitize, ipc).
func TestDependencies(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to list the dependencies: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	deps := strings.Fields(string(out))
	// The list is the real one: mr's own imports are in it.
	for _, want := range []string{"github.com/streamalloc/streamalloc/mr", "github.com/streamalloc/streamalloc/gpu"} {
		if !slices.Contains(deps, want) {
			t.Fatalf("go list -deps lacks %s:\n%s", want, out)
		}
	}
	banned := []string{
		"github.com/streamalloc/streamalloc/internal/unpickle", // the pickle decoder
		"github.com/streamalloc/streamalloc/trace/torchsnap",   // its user
		"gonum.org/v1/plot",                         // the charts
		"github.com/streamalloc/streamalloc/report", // their user
		// Layer 4, built on mr: ipc lends its allocations, buf wraps
		// them, sanitize checks their users.
		"github.com/streamalloc/streamalloc/ipc",
		"github.com/streamalloc/streamalloc/buf",
		"github.com/streamalloc/streamalloc/sanitize",
	}
	for _, d := range deps {
		for _, b := range banned {
			if d == b || strings.HasPrefix(d, b+"/") {
				t.Errorf("mr depends on %s", d)
			}
		}
	}
}
