//go:build streamalloc_nocapturequery

package cudagpu

// queryForeignCapture is false in builds tagged streamalloc_nocapturequery,
// which exist to measure the cost of the capture query against a build
// without it (capturequery_on.go). Such a build does not see a capture that
// other code began on an adopted stream: the resources would serve the
// graph from their free lists, whose addresses the graph would keep. Never
// ship one.
const queryForeignCapture = false
