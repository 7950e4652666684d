//go:build !streamalloc_nocapturequery

package cudagpu

// queryForeignCapture says whether CaptureID asks the driver about adopted
// streams (capture.go). It is true in every ordinary build; the build tag
// streamalloc_nocapturequery (capturequery_off.go) sets it false for one
// purpose only: measuring what that query costs an allocation, by building
// the same code with and without it (scripts/capi-bench.sh).
const queryForeignCapture = true
