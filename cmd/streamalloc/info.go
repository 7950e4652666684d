package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/streamalloc/streamalloc/gpu"
	"github.com/streamalloc/streamalloc/gpu/backend"
)

func newInfoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "info",
		Short: "Show the devices, the driver version and memory-pool support",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kind, _ := cmd.Flags().GetString("device")
			b, err := backend.Open(kind)
			if err != nil {
				return err
			}
			return writeInfo(cmd.OutOrStdout(), b)
		},
	}
}

// writeInfo prints one block per device of b, says plainly when the
// devices are simulated (and then prints no driver version: the
// simulator's would be made up), and ends with what to run next.
func writeInfo(w io.Writer, b gpu.Backend) error {
	n, err := b.DeviceCount()
	if err != nil {
		return fmt.Errorf("info: device count: %w", err)
	}
	if b.Simulated() {
		fmt.Fprintln(w, "backend: sim (SIMULATED GPU: no CUDA device or driver in use)")
		fmt.Fprintln(w, "driver: none (the simulator models the CUDA driver's behaviour, not a version of it)")
	} else {
		ver, err := b.DriverVersion()
		if err != nil {
			return fmt.Errorf("info: driver version: %w", err)
		}
		fmt.Fprintf(w, "backend: %s\n", b.Name())
		fmt.Fprintf(w, "driver version: %d.%d\n", ver/1000, ver%1000/10)
	}
	fmt.Fprintf(w, "devices: %d\n", n)
	for i := range n {
		d, err := b.Device(i)
		if err != nil {
			return fmt.Errorf("info: device %d: %w", i, err)
		}
		p := d.Properties()
		free, total, err := d.MemGetInfo()
		if err != nil {
			return fmt.Errorf("info: device %d: memory: %w", i, err)
		}
		sim := ""
		if p.Simulated {
			sim = " (simulated)"
		}
		fmt.Fprintf(w, "device %d: %s%s\n", i, p.Name, sim)
		fmt.Fprintf(w, "  compute capability: %d.%d\n", p.ComputeMajor, p.ComputeMinor)
		fmt.Fprintf(w, "  memory: %s total, %s free\n", formatBytes(total), formatBytes(free))
		fmt.Fprintf(w, "  stream-ordered memory pools: %v\n", p.MemoryPoolsSupported)
	}
	fmt.Fprintln(w, "next: go run ./cmd/streamalloc replay replay/testdata/*.csv.gz   (the bundled traces against the pool)")
	fmt.Fprintln(w, "      go run ./cmd/streamalloc replay --resource all TRACE...     (your RMM log or PyTorch snapshot, every resource)")
	fmt.Fprintln(w, "      go run ./cmd/streamalloc bench --resource async,pool        (the allocators' speed on this machine)")
	return nil
}

// formatBytes renders n in binary units with one decimal.
func formatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
