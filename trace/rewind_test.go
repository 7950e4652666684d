package trace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fifo makes a named pipe in a test directory and writes data into it
// from a goroutine once a reader opens it.
func fifo(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	go func() {
		w, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		w.Write(data)
		w.Close()
	}()
	return p
}

// A trace is read again after Rewind from the same input, whether it is
// a regular file or a pipe (read once, spooled), plain or compressed,
// rewound at its end or in its middle; the spool leaves no file behind.
func TestRewind(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	want, err := readAll(t, NewCSVReader(strings.NewReader(smallCSV), "want"))
	if err != nil || len(want) != 3 {
		t.Fatalf("%d events, %v", len(want), err)
	}
	for _, tc := range []struct {
		name string
		open func(t *testing.T) string
	}{
		{"file", func(t *testing.T) string { return writeFile(t, "t.csv", []byte(smallCSV)) }},
		{"gzip file", func(t *testing.T) string { return writeFile(t, "t.csv.gz", gz(t, []byte(smallCSV))) }},
		{"pipe", func(t *testing.T) string { return fifo(t, []byte(smallCSV)) }},
		{"gzip pipe", func(t *testing.T) string { return fifo(t, gz(t, []byte(smallCSV))) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Open(tc.open(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			// One event, then from the start: three times in all.
			if _, err := f.Next(); err != nil {
				t.Fatal(err)
			}
			for pass := range 3 {
				if err := f.Rewind(); err != nil {
					t.Fatalf("pass %d: %v", pass, err)
				}
				got, err := readAll(t, f)
				if err != nil || len(got) != len(want) {
					t.Fatalf("pass %d: %d events, %v; want %d", pass, len(got), err, len(want))
				}
				for i := range got {
					if got[i] != want[i] {
						t.Errorf("pass %d: event %d = %+v, want %+v", pass, i, got[i], want[i])
					}
				}
				if done, total := f.Progress(); done != total || total == 0 {
					t.Errorf("pass %d: progress %d of %d at the end", pass, done, total)
				}
			}
		})
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("spool files left in the temporary directory: %v", ents)
	}
}

// A bad trace from a pipe gives the same error on every pass.
func TestRewindBadPipe(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	f, err := Open(fifo(t, []byte(smallCSV+"1,10:00:00.000004,steal,0x10,5,0x0\n")), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for pass := range 2 {
		evs, err := readAll(t, f)
		var pe *ParseError
		if !errors.Is(err, ErrAction) || !errors.As(err, &pe) || pe.Line != 5 || len(evs) != 3 {
			t.Errorf("pass %d: %d events, %v; want 3 and ErrAction at line 5", pass, len(evs), err)
		}
		if err := f.Rewind(); err != nil {
			t.Fatal(err)
		}
	}
}
