package trace_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/streamalloc/streamalloc/trace"
)

func ExampleNewCSVReader() {
	log := `Thread,Time,Action,Pointer,Size,Stream
2342727,10:16:00.000000,allocate,0x7f7e14000000,16777216,0
2342727,10:16:00.002061,allocate,0x7f7e81d00000,2048,0x28b473b0
2342727,10:16:00.205345,free,0x7f7e14000000,16777216,0
`
	r := trace.NewCSVReader(strings.NewReader(log), "example.csv")
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s %#x %d bytes on stream %#x\n", ev.Op, ev.Ptr, ev.Size, ev.Stream)
	}
	// Output:
	// allocate 0x7f7e14000000 16777216 bytes on stream 0x0
	// allocate 0x7f7e81d00000 2048 bytes on stream 0x28b473b0
	// free 0x7f7e14000000 16777216 bytes on stream 0x0
}

func ExampleNewCSVWriter() {
	w := trace.NewCSVWriter(os.Stdout)
	w.Write(trace.Event{Op: trace.Alloc, Thread: 1, Time: 10*time.Hour + 2061*time.Microsecond,
		Ptr: 0x7f7e81d00000, Size: 2048, Stream: 0x28b473b0})
	w.Write(trace.Event{Op: trace.Free, Thread: 1, Time: 10*time.Hour + 5*time.Millisecond,
		Ptr: 0x7f7e81d00000, Size: 2048, Stream: 0x28b473b0})
	if err := w.Flush(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// Thread,Time,Action,Pointer,Size,Stream
	// 1,10:00:00.002061,allocate,0x7f7e81d00000,2048,0x28b473b0
	// 1,10:00:00.005000,free,0x7f7e81d00000,2048,0x28b473b0
}

// NewReader, like Open, tells the format and a gzip layer from the
// content: here an RMM log compressed in memory.
func ExampleNewReader() {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	w := trace.NewCSVWriter(zw)
	w.Write(trace.Event{Op: trace.Alloc, Ptr: 0x7f0000000000, Size: 4096})
	w.Write(trace.Event{Op: trace.Free, Ptr: 0x7f0000000000, Size: 4096})
	w.Flush()
	zw.Close()

	r, format, err := trace.NewReader(&buf, "log.gz", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: line %d: %s %d bytes\n", format, ev.Line, ev.Op, ev.Size)
	}
	// Output:
	// rmm-csv: line 2: allocate 4096 bytes
	// rmm-csv: line 3: free 4096 bytes
}

func ExampleParseError() {
	r := trace.NewCSVReader(strings.NewReader(trace.Header+"\n1,10:00:00.000000,allocate,0x100,-5,0\n"), "bad.csv")
	_, err := r.Next()
	var pe *trace.ParseError
	fmt.Println(err)
	fmt.Println(errors.As(err, &pe), pe.Line, errors.Is(err, trace.ErrNegativeSize))
	// Output:
	// bad.csv:2: size -5 is negative
	// true 2 true
}
