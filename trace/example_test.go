package trace_test

import (
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

func ExampleOpen() {
	// Open detects gzip and the format from the content.
	f, err := trace.Open("testdata/snapshot-p2.pickle.gz", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	n := 0
	for {
		_, err := f.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		n++
	}
	fmt.Println(f.Format(), f.Compressed(), n, "events")
	// Output: torch-snapshot true 11 events
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
