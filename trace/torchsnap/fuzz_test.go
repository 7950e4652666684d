package torchsnap

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/streamalloc/streamalloc/trace"
)

const smallCSV = trace.Header + "\n" +
	"1,10:00:00.000001,allocate,0x7f0000000000,4096,0x0\n" +
	"1,10:00:00.000002,allocate,0x7f0000001000,256,0x10\n" +
	"1,10:00:00.000003,free,0x7f0000000000,4096,0x0\n"

// FuzzNewReader: trace.NewReader with this package linked, so format
// detection, gzip, the CSV reader and the pickle decoder, on any input:
// no panic, errors are *trace.ParseError naming the file, events valid.
func FuzzNewReader(f *testing.F) {
	pkl, err := os.ReadFile("testdata/snapshot.pickle")
	if err != nil {
		f.Fatal(err)
	}
	pgz, err := os.ReadFile("testdata/snapshot-p2.pickle.gz")
	if err != nil {
		f.Fatal(err)
	}
	shared, err := os.ReadFile("testdata/shared.pickle")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(pkl)
	f.Add(pgz)
	f.Add(shared)
	f.Add(pkl[:len(pkl)/3])
	f.Add([]byte(smallCSV))
	f.Add(gz(f, []byte(smallCSV)))
	f.Add([]byte{0x1f, 0x8b})
	f.Add([]byte{0x80, 2, '}', ']', 'K', 1, 's', '.'})
	f.Add(encodePickle(f, map[any]any{"device_traces": []any{[]any{
		map[any]any{"action": "alloc", "addr": int64(1), "size": int64(2), "stream": int64(3)},
		map[any]any{"action": "free_completed", "addr": int64(1), "size": int64(2), "stream": int64(3)},
		map[any]any{"action": "oom", "device_free": int64(1), "size": int64(2), "stream": int64(3)},
	}}}, 2))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Keep a gzip bomb from taking the fuzzer's memory: the readers
		// themselves do not limit decompressed size.
		if zr, err := gzip.NewReader(bytes.NewReader(data)); err == nil {
			if n, _ := io.Copy(io.Discard, io.LimitReader(zr, 1<<24)); n >= 1<<24 {
				t.Skip("decompresses to more than 16 MiB")
			}
		}
		r, _, err := trace.NewReader(bytes.NewReader(data), "fuzz", nil)
		var evs []trace.Event
		if err == nil {
			evs, err = readAll(t, r)
		}
		if err != nil {
			var pe *trace.ParseError
			if !errors.As(err, &pe) || pe.File != "fuzz" {
				t.Fatalf("error %#v is not a *ParseError naming the file", err)
			}
		}
		for _, ev := range evs {
			if ev.Op < trace.Alloc || ev.Op > trace.Free || ev.Size < 0 {
				t.Fatalf("invalid event %+v", ev)
			}
		}
	})
}
