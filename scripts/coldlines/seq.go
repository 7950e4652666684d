// seq: the converter from a recorded allocation trace to the flat call
// sequence that capi/testdata/cold_lines.c replays through the C ABI.
//
// A recorded trace (an RMM log such as pluggable/testdata's, or anything
// trace.Open reads) names blocks by the recorded process's addresses; the
// replaying program needs which earlier allocation each free names. The
// sequence file says that in a form a C program reads with fscanf:
//
//	cold-lines-seq 1 NAME ALLOCS CALLS
//	a SIZE      an allocation of SIZE bytes, the next number (from 0)
//	f N         the free of allocation number N
//
// Allocations the recorded allocator refused are left out (the host got no
// pointer for them). The sequence is replayed on one stream, the legacy
// default stream, as PyTorch calls the allocator there: a trace that
// recorded more than one stream is refused (errStreams), as is a free of
// an address that is not live (errUnknownFree) and an empty trace
// (errNoCalls). The same trace always gives the same file.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/streamalloc/streamalloc/trace"
)

// seqMagic opens a sequence file; the number after it is its version.
const seqMagic = "cold-lines-seq 1"

var (
	errStreams     = errors.New("trace records more than one stream")
	errUnknownFree = errors.New("free of an address that is not live")
	errNoCalls     = errors.New("trace has no allocation")
	errSeqName     = errors.New("sequence name must be one word of letters, digits, '-', '_' or '.'")
)

// seqCall is one call of a sequence: an allocation of size bytes, or the
// free of allocation number id.
type seqCall struct {
	alloc bool
	size  int64
	id    int
}

// readSeq reads the calls of a trace, mapping each free to the number of
// the allocation it names.
func readSeq(r trace.Reader) ([]seqCall, error) {
	live := map[uint64]int{} // recorded address -> allocation number
	var calls []seqCall
	allocs := 0
	stream, streamSeen := uint64(0), false
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if ev.Op == trace.AllocFailure {
			continue
		}
		if !streamSeen {
			stream, streamSeen = ev.Stream, true
		} else if ev.Stream != stream {
			return nil, fmt.Errorf("%s line %d: stream %#x after %#x: %w", r.Name(), ev.Line, ev.Stream, stream, errStreams)
		}
		switch ev.Op {
		case trace.Alloc:
			live[ev.Ptr] = allocs
			calls = append(calls, seqCall{alloc: true, size: ev.Size, id: allocs})
			allocs++
		case trace.Free:
			id, ok := live[ev.Ptr]
			if !ok {
				return nil, fmt.Errorf("%s line %d: %#x: %w", r.Name(), ev.Line, ev.Ptr, errUnknownFree)
			}
			delete(live, ev.Ptr)
			calls = append(calls, seqCall{id: id})
		}
	}
	if allocs == 0 {
		return nil, fmt.Errorf("%s: %w", r.Name(), errNoCalls)
	}
	return calls, nil
}

// writeSeq writes calls as a sequence file named name.
func writeSeq(w io.Writer, name string, calls []seqCall) error {
	if !validSeqName(name) {
		return fmt.Errorf("%q: %w", name, errSeqName)
	}
	allocs := 0
	for _, c := range calls {
		if c.alloc {
			allocs++
		}
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%s %s %d %d\n", seqMagic, name, allocs, len(calls))
	for _, c := range calls {
		if c.alloc {
			fmt.Fprintf(bw, "a %d\n", c.size)
		} else {
			fmt.Fprintf(bw, "f %d\n", c.id)
		}
	}
	return bw.Flush()
}

func validSeqName(s string) bool {
	if s == "" || len(s) > 40 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.", r)) {
			return false
		}
	}
	return true
}

// seqName is the name a trace file's sequence gets: its base name without
// the extensions and the "torch-train-" prefix of pluggable's recordings.
func seqName(path string) string {
	s := path[strings.LastIndexByte(path, '/')+1:]
	if i := strings.IndexByte(s, '.'); i > 0 {
		s = s[:i]
	}
	return strings.TrimPrefix(s, "torch-train-")
}

// convertSeq converts trace file in into sequence file out.
func convertSeq(in, out string) error {
	f, err := trace.Open(in, nil)
	if err != nil {
		return err
	}
	defer f.Close()
	calls, err := readSeq(f)
	if err != nil {
		return err
	}
	o, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := writeSeq(o, seqName(in), calls); err != nil {
		o.Close()
		return fmt.Errorf("%s: %w", out, err)
	}
	return o.Close()
}
