// Package buf holds owning, stream-ordered handles to device memory for
// application code: Buffer, an untyped run of bytes, and Vector[T], a typed
// array of fixed-size elements.
//
// # Ownership and stream order
//
// New allocates from any mr.Resource on a stream; the buffer is "ordered on"
// that stream: copies, sets, Resize and Close are enqueued there (SetStream
// moves it to another). Nothing blocks the host. Close frees the memory in
// stream order; a closed buffer refuses every operation with ErrClosed.
//
// # Block-use tracking
//
// Every buffer remembers who used it, so that work on several streams is
// ordered without the caller recording events by hand. The state is the
// last write (a stream and an event recorded after it) and the reads since
// that write (one per stream: a later read on a stream supersedes an
// earlier one there, because a stream runs in order). Before a use on
// stream U (Prepare):
//
//   - a read makes U wait on the last write;
//   - a write makes U wait on the last write and on every read since.
//
// Waits on U itself are skipped: stream order already covers them. After
// the use (Finish) an event is recorded on U; a write replaces the last
// write and clears the reads, a read replaces U's read. Use does all three
// under the buffer's lock, so uses from several goroutines are ordered too.
// Close, on any stream, first makes that stream wait on the last write and
// every read, so memory allocated on S1, used on S2 and S3 and freed on S4
// is freed only after all of that work, and is never stranded.
//
// The allocation itself counts as a write on its stream whose event is
// recorded lazily: a use on another stream records it when it first needs
// it. An event that was recorded is exact; a lazy one covers everything the
// stream had enqueued when it was recorded, which is later than needed but
// never too early. The same lazy mark is the fallback when recording an
// event fails, so a failed record never loses an ordering.
//
// Events come from a per-device cache: an event leaves the cache when a
// slot of the state takes it and goes back when the slot is overwritten, so
// the steady state creates none. Re-recording an event moves it without
// changing waits already enqueued on it (CUDA's semantics), which is what
// makes recycling safe.
//
// An Untracked buffer skips the waits and the records: it behaves like raw
// CUDA memory, and exists to show (in the hazard tests) what tracking
// prevents.
//
// # CUDA graphs
//
// Tracked buffers may be used inside a stream capture begun with
// mr.BeginCapture, and the graph's executable (made from the graph that
// Capture.End returns) launched any number of times, on any stream,
// between uses outside the graph. The rules:
//
//   - Inside the capture a buffer is tracked by the same rules in a state
//     of its own: its uses on the capture's streams wait on each other
//     through events recorded in the capture, which become edges of the
//     graph. They never wait on an event recorded outside the capture
//     (the driver refuses that and invalidates the capture), and uses
//     outside never wait on one recorded inside.
//   - Each launch is a use of every buffer the graph uses, on the launch
//     stream, with the access the graph makes of it (a write if any of
//     its uses writes): the launch stream first waits on the buffer's
//     last write (and, for a write, every read) outside the graph, be it
//     the writer before the capture, an earlier launch or a use in
//     between; an event recorded after the launch is the buffer's new last
//     write or read, so later uses wait on the launch. A replay therefore
//     never races with a use outside the graph, whichever stream launches
//     it. (Launching through another executable, or into a capture, is not
//     tracked: the latter is refused with mr.ErrStreamCapturing.)
//   - A use on a stream whose capture was not begun with mr.BeginCapture
//     is refused with an error matching mr.ErrStreamCapturing, and so is
//     New on such a stream: the launches of that graph could not be
//     ordered. The refusal does not disturb the capture.
//   - A buffer allocated inside the capture is the graph's: it is written
//     by every launch, closed inside the capture it is freed by the graph,
//     closed outside it is freed as the graph's output, and it is closed
//     for the program when the capture is released.
//   - The memory of a buffer that a graph not yet released uses stays
//     allocated while the graph may run: Close (inside the capture or
//     after it) closes the buffer for the program at once and frees the
//     memory at the Release of the last such capture, on Release's stream
//     and after every use recorded outside the graph. Resize refuses with
//     ErrGraphUse meanwhile, and with mr.ErrStreamCapturing on a capturing
//     stream; SetStream refuses to move a buffer into or out of a capture
//     (mr.ErrStreamCapturing).
//   - A lazy mark (an allocation not yet used elsewhere) on a stream that
//     is now capturing cannot be recorded for a stream outside that
//     capture: such a wait is refused with mr.ErrStreamCapturing.
//
// # Generations
//
// Every allocation (New and every Resize) gets a fresh generation number
// from a process-wide counter. A Ref is a small value that carries the
// buffer and the generation it was taken at; once the buffer is closed or
// resized its memory may be handed to someone else, and every operation
// through the Ref returns ErrUseAfterFree and enqueues nothing.
//
// # Observers
//
// A resource that implements Observer (the stream-order sanitizer does) is
// told of every use a buffer declares and every event it records or waits
// on. An observer may refuse a use; the buffer then enqueues nothing for it.
//
// # Errors
//
// Bad input is an error, never a panic and never a write outside the
// allocation: a nil buffer matches ErrNilBuffer, a closed one ErrClosed, a
// stale Ref ErrUseAfterFree, a range outside the buffer ErrOutOfRange, a
// slice or buffer of the wrong length ErrLength, a nil stream
// gpu.ErrInvalidHandle, a stream of another device gpu.ErrWrongDevice, a
// negative size mr.ErrInvalidSize.
package buf
