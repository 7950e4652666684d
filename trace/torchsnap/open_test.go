package torchsnap

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/streamalloc/streamalloc/trace"
)

func gz(t testing.TB, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(data)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// trace.Open reads snapshots, plain or compressed, whatever the file is
// called, once this package is linked.
func TestOpenDetectsByContent(t *testing.T) {
	pkl, err := os.ReadFile("testdata/snapshot.pickle")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string // deliberately misleading extensions
		data       []byte
		compressed bool
	}{
		{"snapshot.csv", pkl, false},
		{"snapshot.txt", gz(t, pkl), true},
	}
	for _, tc := range tests {
		p := filepath.Join(t.TempDir(), tc.name)
		if err := os.WriteFile(p, tc.data, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := trace.Open(p, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if f.Format() != trace.FormatSnapshot || f.Compressed() != tc.compressed {
			t.Errorf("%s: format %s compressed %v, want %s %v", tc.name, f.Format(), f.Compressed(), trace.FormatSnapshot, tc.compressed)
		}
		evs, err := readAll(t, f)
		if err != nil || len(evs) != len(fixtureAll) {
			t.Errorf("%s: %d events, %v; want %d", tc.name, len(evs), err, len(fixtureAll))
		}
		if done, total := f.Progress(); done != total {
			t.Errorf("%s: progress %d of %d at the end", tc.name, done, total)
		}
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	}
}

// A truncated compressed snapshot fails at Open, blaming the gzip data:
// the reader reads on to the end of the stream after the pickle's STOP,
// so that gzip checks its trailer.
func TestOpenTruncatedSnapshot(t *testing.T) {
	pkl, err := os.ReadFile("testdata/snapshot.pickle")
	if err != nil {
		t.Fatal(err)
	}
	zp := gz(t, pkl)
	p := filepath.Join(t.TempDir(), "trace.gz")
	if err := os.WriteFile(p, zp[:len(zp)-10], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = trace.Open(p, nil)
	if !errors.Is(err, trace.ErrCompressed) {
		t.Fatalf("error %v, want ErrCompressed", err)
	}
	var pe *trace.ParseError
	if !errors.As(err, &pe) || pe.File != p {
		t.Fatalf("error %#v does not name %s", err, p)
	}
}

// A snapshot read from a pipe is decoded once and rewound in memory: the
// pipe is empty after the first pass, and every pass has every event.
func TestOpenPipeRewinds(t *testing.T) {
	pkl, err := os.ReadFile("testdata/snapshot.pickle")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	p := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	data := gz(t, pkl)
	go func() {
		w, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		w.Write(data)
		w.Close()
	}()
	f, err := trace.Open(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, ok := f.Reader.(*Reader); !ok {
		t.Fatalf("reader %T, want *torchsnap.Reader", f.Reader)
	}
	for pass := range 3 {
		evs, err := readAll(t, f)
		if err != nil || len(evs) != len(fixtureAll) {
			t.Fatalf("pass %d: %d events, %v; want %d", pass, len(evs), err, len(fixtureAll))
		}
		if err := f.Rewind(); err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("files left in the temporary directory: %v", ents)
	}
}
