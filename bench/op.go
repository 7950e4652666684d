// What one op of each case is: ns/op means little until one knows what
// was timed. Op describes it from the same constants the workloads use,
// so the description cannot drift from the code.

package bench

import "fmt"

// Op says, in a line of at most 90 characters, what one iteration (one
// "op" of ns/op) of the case does.
func (c Case) Op() string {
	switch c.Workload {
	case WorkloadPair:
		return fmt.Sprintf("one Allocate of %s and its Deallocate, on one stream", SizeName(c.Size))
	case WorkloadStreams:
		return fmt.Sprintf("a round: %d goroutines on their own streams, %d pairs of %s each on average",
			c.Streams, PairsPerRound, SizeName(c.Size))
	case WorkloadRandom:
		o := c.Random.withDefaults()
		return fmt.Sprintf("one Allocate or Deallocate at random, up to %d blocks of %s to %s live",
			o.MaxLive, SizeName(o.MinSize), SizeName(o.MaxSize))
	case WorkloadNotebook:
		return fmt.Sprintf("Allocate %s, fill it with a kernel, Deallocate, on one stream; a sync every %d",
			SizeName(NotebookBytes), NotebookBatch)
	case WorkloadPipeline:
		return fmt.Sprintf("a %s buffer filled (%v kernel) on one stream, used (%v) and freed on another",
			SizeName(PipelineBytes), PipelineWork, PipelineWork)
	}
	return "unknown workload " + string(c.Workload)
}
