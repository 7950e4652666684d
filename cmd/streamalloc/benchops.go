package main

import (
	"fmt"
	"io"

	"github.com/streamalloc/streamalloc/bench"
)

// writeBenchOps says, under the bench table, what one op of each case
// that ran is (bench.Case.Op), once per case name: the resources of a
// case share it.
func writeBenchOps(w io.Writer, cases []bench.Case) error {
	seen := map[string]bool{}
	var lines []string
	width := 0
	for _, c := range cases {
		if seen[c.Name()] {
			continue
		}
		seen[c.Name()] = true
		lines = append(lines, c.Name(), c.Op())
		width = max(width, len(c.Name()))
	}
	if _, err := fmt.Fprintln(w, "\none op:"); err != nil {
		return err
	}
	for i := 0; i < len(lines); i += 2 {
		if _, err := fmt.Fprintf(w, "  %-*s  %s\n", width, lines[i], lines[i+1]); err != nil {
			return err
		}
	}
	return nil
}
