package main

import (
	"fmt"
	"os"

	"github.com/streamalloc/streamalloc/replay"
	"github.com/streamalloc/streamalloc/report"
)

// writeHTML writes the replay report page: per trace, live and reserved
// bytes over the replay for each resource, and the summary table.
func writeHTML(path string, results []*replay.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	if err := report.WriteHTML(f, results, report.Options{}); err != nil {
		f.Close()
		return fmt.Errorf("--html %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--html %s: %w", path, err)
	}
	return nil
}
