// The CUresults of stream capture (cuda.h's 900-908, and 401, which
// capture calls return on a stream in the wrong state), kept beside the
// capture entry points. They join result.go's names at init: 900 has two
// names here (ErrStreamCapture, ErrStreamCaptureUnsupported), which one
// map literal could not hold.

package cuda

// Capture results. ErrStreamCaptureUnsupported is ErrStreamCapture by
// its full name.
const (
	// ErrIllegalState: the call is not valid in the object's state, as
	// cuStreamBeginCapture on a stream already capturing, or
	// cuStreamEndCapture on one that is not (measured on the H100).
	ErrIllegalState Result = 401
	// ErrStreamCaptureUnsupported: the call is not permitted while the
	// stream (or, in global mode, any stream) is capturing.
	ErrStreamCaptureUnsupported Result = 900
	// ErrStreamCaptureInvalidated: an earlier error invalidated the
	// capture; it can only be ended.
	ErrStreamCaptureInvalidated Result = 901
	// ErrStreamCaptureMerge: the call would merge two independent
	// captures.
	ErrStreamCaptureMerge Result = 902
	// ErrStreamCaptureUnmatched: the capture was not begun on this stream.
	ErrStreamCaptureUnmatched Result = 903
	// ErrStreamCaptureUnjoined: the capture forked into a stream that did
	// not join back into the stream it began on.
	ErrStreamCaptureUnjoined Result = 904
	// ErrStreamCaptureIsolation: the call would make the capture depend on
	// work outside it.
	ErrStreamCaptureIsolation Result = 905
	// ErrStreamCaptureImplicit: an implicit dependency on the legacy
	// stream.
	ErrStreamCaptureImplicit Result = 906
	// ErrCapturedEvent: the event was last recorded in a capture.
	ErrCapturedEvent Result = 907
	// ErrStreamCaptureWrongThread: a non-relaxed capture ended on another
	// thread than the one that began it.
	ErrStreamCaptureWrongThread Result = 908
)

func init() {
	for r, n := range map[Result]string{
		ErrIllegalState:             "CUDA_ERROR_ILLEGAL_STATE",
		ErrStreamCaptureInvalidated: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
		ErrStreamCaptureMerge:       "CUDA_ERROR_STREAM_CAPTURE_MERGE",
		ErrStreamCaptureUnmatched:   "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
		ErrStreamCaptureUnjoined:    "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
		ErrStreamCaptureIsolation:   "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
		ErrStreamCaptureImplicit:    "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
		ErrCapturedEvent:            "CUDA_ERROR_CAPTURED_EVENT",
		ErrStreamCaptureWrongThread: "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
	} {
		resultNames[r] = n
	}
}
