// Command streamalloc shows the GPUs streamalloc sees, replays allocation
// traces against its memory resources, and benchmarks them.
//
//	streamalloc info                       devices, driver, pool support
//	streamalloc replay [flags] TRACE...    replay RMM CSV logs or PyTorch snapshots
//	streamalloc convert TRACE OUT          write a trace as an RMM CSV log
//	streamalloc bench [flags]              the resource benchmark suite
//	streamalloc soak [flags]               the recommended stack under load, every byte checked
//
// Every subcommand takes --device auto|sim|cuda: auto uses the GPU when a
// driver and a device are present and the simulated GPU otherwise.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "streamalloc:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "streamalloc",
		Short:         "Stream-ordered GPU memory management: inspect, replay, benchmark",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().String("device", "auto", "backend: auto, sim or cuda")
	root.AddCommand(newInfoCmd(), newReplayCmd(), newConvertCmd(), newBenchCmd(), newSoakCmd())
	return root
}
