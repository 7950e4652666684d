package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/streamalloc/streamalloc/replay"
	"github.com/streamalloc/streamalloc/report"
)

// writeHTML writes the replay viewer page (package report): the summary
// table, and per trace the overview, the active memory, the memory map and
// the segments at a chosen moment of each resource, under the command line
// that produced them and the date. It writes to a new output for path,
// which the caller commits or aborts.
func writeHTML(path, command string, results []*replay.Result) (*outputFile, error) {
	o, err := createOutput(path)
	if err != nil {
		return nil, fmt.Errorf("--html: %w", err)
	}
	opts := report.Options{Command: command, Date: time.Now()}
	if err := report.WriteHTML(o, results, opts); err != nil {
		o.abort()
		return nil, fmt.Errorf("--html %s: %w", path, err)
	}
	return o, nil
}

// invocation writes the command line that ran cmd: its path, the flags
// set (in name order, as --name=value) and args, each quoted as a shell
// would need it, so that it can be pasted to run again.
func invocation(cmd *cobra.Command, args []string) string {
	out := strings.Fields(cmd.CommandPath())
	visit := func(f *pflag.Flag) { out = append(out, "--"+f.Name+"="+shellQuote(f.Value.String())) }
	cmd.Flags().Visit(visit) // the flags set, inherited ones included
	for _, a := range args {
		out = append(out, shellQuote(a))
	}
	return strings.Join(out, " ")
}

// shellQuote single-quotes s if a shell would otherwise split or expand it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`!*?[](){}<>|&;#~") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
