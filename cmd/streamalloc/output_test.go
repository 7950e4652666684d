package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An output that names an input, or another output, is refused before
// anything is read or written: the input keeps every byte.
func TestOutputNeverClobbersAnInput(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.csv.gz")
	if err := os.WriteFile(tr, []byte(gzipped(t, smallTrace)), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "u.csv")
	if err := os.WriteFile(other, []byte(smallTrace), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.csv.gz")
	if err := os.Symlink(tr, link); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(dir, "hard.csv.gz")
	if err := os.Link(tr, hard); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(dir, "new.html")
	cases := []struct {
		name string
		args []string
	}{
		{"log is the trace", []string{"--log", tr, tr}},
		{"log is the second trace", []string{"--log", tr, other, tr}},
		{"html is the trace", []string{"--html", tr, tr}},
		{"log through a symlink", []string{"--log", link, tr}},
		{"log is a hard link", []string{"--log", hard, tr}},
		{"log spelled differently", []string{"--log", filepath.Join(sub, "..", "t.csv.gz"), tr}},
		{"log and html are one new file", []string{"--log", fresh, "--html", fresh, tr}},
		{"log and html are one old file", []string{"--log", other, "--html", other, tr}},
	}
	want, _ := os.ReadFile(tr)
	wantOther, _ := os.ReadFile(other)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"replay", "--device", "sim", "--resource", "direct,pool"}, tc.args...)
			_, _, err := run(t, args...)
			if !errors.Is(err, errOutputIsInput) {
				t.Fatalf("error %v, want %v", err, errOutputIsInput)
			}
			if got, _ := os.ReadFile(tr); string(got) != string(want) {
				t.Errorf("the trace changed: %d bytes, was %d", len(got), len(want))
			}
			if got, _ := os.ReadFile(other); string(got) != string(wantOther) {
				t.Errorf("the other file changed: %d bytes, was %d", len(got), len(wantOther))
			}
			if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s was created (%v)", fresh, err)
			}
			assertNoTemp(t, dir)
		})
	}
}

// A run that fails leaves existing outputs as they were and no temporary
// file; a run that succeeds replaces them whole, keeping their mode, and
// through a symbolic link replaces the file it points to.
func TestOutputWrittenAtomically(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.csv")
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(good, []byte(smallTrace), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("Thread,Time,Action,Pointer,Size\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "replay.log")
	page := filepath.Join(dir, "page.html")
	const old = "the previous output\n"
	for _, p := range []string{logPath, page} {
		if err := os.WriteFile(p, []byte(old), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// The second trace is malformed: both replays of the first ran and
	// wrote to the log before the failure.
	_, _, err := run(t, "replay", "--device", "sim", "--resource", "direct,pool", "--log", logPath, "--html", page, good, bad)
	if err == nil {
		t.Fatal("a malformed trace did not fail the run")
	}
	for _, p := range []string{logPath, page} {
		if b, _ := os.ReadFile(p); string(b) != old {
			t.Errorf("failed run changed %s to %q", p, b)
		}
	}
	assertNoTemp(t, dir)

	link := filepath.Join(dir, "log-link")
	if err := os.Symlink(logPath, link); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, "replay", "--device", "sim", "--resource", "direct", "--log", link, "--html", page, good); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(logPath)
	if !strings.HasPrefix(string(b), "Thread,Time,Action,Pointer,Size,Stream\n") || strings.Count(string(b), "\n") != 7 {
		t.Errorf("log after a good run:\n%s", b)
	}
	if b, _ := os.ReadFile(page); !strings.Contains(string(b), `<script type="application/octet-stream" id="sa-data-0">`) {
		t.Errorf("page after a good run has no trace data: %.80q", b)
	}
	for _, p := range []string{logPath, page} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want it kept at 0600", p, st.Mode(), err)
		}
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symbolic link was replaced: %v %v", st.Mode(), err)
	}
	assertNoTemp(t, dir)
}

// An output that is not a regular file (here the null device) is written
// in place: it cannot be renamed over.
func TestOutputToDevice(t *testing.T) {
	p := writeFile(t, "t.csv", smallTrace)
	if _, _, err := run(t, "replay", "--device", "sim", "--resource", "direct", "--log", os.DevNull, p); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(os.DevNull); err != nil || st.Mode().IsRegular() {
		t.Fatalf("%s is now %v (%v)", os.DevNull, st.Mode(), err)
	}
}

// assertNoTemp fails if a temporary output file is left in dir.
func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}
