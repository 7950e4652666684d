// Output files (--log, --html): never an input, written whole or not at
// all.
//
// An output is checked against every input and every other output before
// anything is read (checkOutputs): a path that names the same file as
// another (os.SameFile, so links and ./x spellings are caught) is
// refused with errOutputIsInput, and nothing is opened for writing.
//
// An output is then written to a temporary file in the directory of its
// destination (so that the final rename stays on one file system) and
// renamed over the destination only when the whole run has succeeded
// (outputFile.commit). A run that fails, or a process that dies, leaves an
// existing output as it was; at worst a temporary file named
// ".NAME.tmp-*" remains after a crash. A destination that is a symbolic
// link is resolved first, so the file it points to is replaced and the
// link kept. A destination that exists and is not a regular file (a
// terminal, a pipe, /dev/stdout) cannot be replaced by a rename: it is
// written in place, as it is opened, and a failed run may leave part of
// the output there.
//
// A new file is created with mode 0666 less the umask, as os.Create does; a
// replaced one keeps its mode.

package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// errOutputIsInput is the error of an output flag that names an input
// trace or another output.
var errOutputIsInput = errors.New("names the same file as an input or another output")

// namedPath is a path with the flag or role that named it, for errors.
type namedPath struct {
	role, path string
}

// checkOutputs refuses any output that is the same file as an input or
// as another output. Outputs that do not exist yet cannot be an input;
// two that do not exist are compared by their cleaned absolute paths.
func checkOutputs(outputs []namedPath, inputs []string) error {
	for i, out := range outputs {
		ost, err := os.Stat(out.path)
		exists := err == nil
		for _, in := range inputs {
			if !exists {
				break
			}
			ist, err := os.Stat(in)
			if err == nil && os.SameFile(ost, ist) {
				return fmt.Errorf("%s %s: %w (trace %s)", out.role, out.path, errOutputIsInput, in)
			}
		}
		for _, other := range outputs[i+1:] {
			if sameOutput(out.path, other.path) {
				return fmt.Errorf("%s %s: %w (%s %s)", out.role, out.path, errOutputIsInput, other.role, other.path)
			}
		}
	}
	return nil
}

// sameOutput reports whether two output paths name one file.
func sameOutput(a, b string) bool {
	ast, aerr := os.Stat(a)
	bst, berr := os.Stat(b)
	if aerr == nil && berr == nil {
		return os.SameFile(ast, bst)
	}
	aa, err1 := filepath.Abs(a)
	ba, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == ba
}

// outputFile is an output being written: *os.File of the temporary file
// (or of the destination itself when it is not a regular file).
type outputFile struct {
	*os.File
	dest    string // where commit puts it
	temp    string // the temporary file, "" when writing in place
	mode    fs.FileMode
	hasMode bool // dest exists: keep its mode
	done    bool
}

// createOutput starts writing the output path. Nothing at path changes
// until commit (but for a destination that is not a regular file).
func createOutput(path string) (*outputFile, error) {
	dest := path
	if real, err := filepath.EvalSymlinks(path); err == nil {
		dest = real
	}
	o := &outputFile{dest: dest}
	if st, err := os.Stat(dest); err == nil {
		if !st.Mode().IsRegular() {
			f, err := os.OpenFile(dest, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				return nil, err
			}
			o.File = f
			return o, nil
		}
		o.mode, o.hasMode = st.Mode().Perm(), true
	}
	dir, base := filepath.Split(dest)
	for range 100 {
		var r [6]byte
		if _, err := rand.Read(r[:]); err != nil {
			return nil, err
		}
		temp := filepath.Join(dir, "."+base+".tmp-"+hex.EncodeToString(r[:]))
		f, err := os.OpenFile(temp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		o.File, o.temp = f, temp
		return o, nil
	}
	return nil, fmt.Errorf("no free temporary name next to %s", dest)
}

// commit makes the output what was written: it closes the file and
// renames it over the destination. After a failed commit the destination
// is as it was and the temporary file is gone.
func (o *outputFile) commit() error {
	if o.done {
		return errors.New("output already committed or aborted")
	}
	o.done = true
	if o.temp == "" {
		return o.File.Close()
	}
	err := o.File.Sync()
	if cerr := o.File.Close(); err == nil {
		err = cerr
	}
	if err == nil && o.hasMode {
		err = os.Chmod(o.temp, o.mode)
	}
	if err == nil {
		err = os.Rename(o.temp, o.dest)
	}
	if err != nil {
		os.Remove(o.temp)
	}
	return err
}

// abort drops what was written; the destination stays as it was. It is
// a no-op after commit, so it can be deferred.
func (o *outputFile) abort() {
	if o.done {
		return
	}
	o.done = true
	o.File.Close()
	if o.temp != "" {
		os.Remove(o.temp)
	}
}
