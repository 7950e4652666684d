package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamalloc/streamalloc/trace"
)

const seqHeader = "Thread,Time,Action,Pointer,Size,Stream\n"

// TestReadSeq: frees name the allocation of their address, numbered in
// order, the address reused after a free naming the new allocation;
// refused allocations are left out; and the file written is the format
// cold_lines.c reads.
func TestReadSeq(t *testing.T) {
	in := seqHeader +
		"0,10:00:00.000001,allocate,0x1000,512,0x1\n" +
		"0,10:00:00.000002,allocate,0x2000,1024,0x1\n" +
		"0,10:00:00.000003,allocate failure,0x0,1099511627776,0x1\n" +
		"0,10:00:00.000004,free,0x1000,512,0x1\n" +
		"0,10:00:00.000005,allocate,0x1000,256,0x1\n" +
		"0,10:00:00.000006,free,0x1000,256,0x1\n" +
		"0,10:00:00.000007,free,0x2000,1024,0x1\n"
	calls, err := readSeq(trace.NewCSVReader(strings.NewReader(in), "t.csv"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := writeSeq(&b, "t", calls); err != nil {
		t.Fatal(err)
	}
	want := "cold-lines-seq 1 t 3 6\na 512\na 1024\nf 0\na 256\nf 2\nf 1\n"
	if b.String() != want {
		t.Errorf("sequence file:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestReadSeqErrors: each input readSeq refuses, with its sentinel.
func TestReadSeqErrors(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     error
	}{
		{"two streams", "0,10:00:00.000001,allocate,0x1000,512,0x1\n0,10:00:00.000002,allocate,0x2000,512,0x2\n", errStreams},
		{"unknown free", "0,10:00:00.000001,allocate,0x1000,512,0x1\n0,10:00:00.000002,free,0x3000,512,0x1\n", errUnknownFree},
		{"double free", "0,10:00:00.000001,allocate,0x1000,512,0x1\n0,10:00:00.000002,free,0x1000,512,0x1\n0,10:00:00.000003,free,0x1000,512,0x1\n", errUnknownFree},
		{"empty", "", errNoCalls},
		{"only failures", "0,10:00:00.000001,allocate failure,0x0,512,0x1\n", errNoCalls},
		{"bad pointer", "0,10:00:00.000001,allocate,zz,512,0x1\n", trace.ErrPointer},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := readSeq(trace.NewCSVReader(strings.NewReader(seqHeader+c.in), "t.csv"))
			if !errors.Is(err, c.want) {
				t.Errorf("readSeq = %v, want %v", err, c.want)
			}
		})
	}
}

// TestWriteSeqName: a name cold_lines.c could not read as one word is
// refused.
func TestWriteSeqName(t *testing.T) {
	calls := []seqCall{{alloc: true, size: 512}}
	for _, name := range []string{"", "two words", "a\nb", strings.Repeat("x", 41), "%s"} {
		if err := writeSeq(&bytes.Buffer{}, name, calls); !errors.Is(err, errSeqName) {
			t.Errorf("writeSeq(%q) = %v, want %v", name, err, errSeqName)
		}
	}
	if got := seqName("pluggable/testdata/torch-train-gpt2-h100.csv.gz"); got != "gpt2-h100" {
		t.Errorf("seqName = %q", got)
	}
}

// TestConvertSeq: a gzipped recording converts to the file readSeq and
// writeSeq make of it; a missing trace is an error.
func TestConvertSeq(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.seq")
	if err := convertSeq("../../pluggable/testdata/cupy-cycle-h100.csv.gz", out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "cold-lines-seq 1 cupy-cycle-h100 280 555\na ") {
		t.Errorf("sequence file starts %q", b[:min(len(b), 60)])
	}
	if err := convertSeq(filepath.Join(dir, "none.csv"), out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("convertSeq of a missing file = %v", err)
	}
}
