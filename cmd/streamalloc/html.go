package main

import (
	"fmt"

	"github.com/streamalloc/streamalloc/replay"
)

// writeHTML writes the replay report page. Wired to package report once it
// lands.
func writeHTML(path string, results []*replay.Result) error {
	return fmt.Errorf("--html %s: not available yet", path)
}
