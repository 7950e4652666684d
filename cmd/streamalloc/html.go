package main

import (
	"fmt"

	"github.com/streamalloc/streamalloc/replay"
	"github.com/streamalloc/streamalloc/report"
)

// writeHTML writes the replay report page (per trace, live and reserved
// bytes over the replay for each resource, and the summary table) to a
// new output for path, which the caller commits or aborts.
func writeHTML(path string, results []*replay.Result) (*outputFile, error) {
	o, err := createOutput(path)
	if err != nil {
		return nil, fmt.Errorf("--html: %w", err)
	}
	if err := report.WriteHTML(o, results, report.Options{}); err != nil {
		o.abort()
		return nil, fmt.Errorf("--html %s: %w", path, err)
	}
	return o, nil
}
