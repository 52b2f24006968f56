// Package atomicfile writes files so that a crash never leaves a
// half-written one behind: the data goes to a temporary file in the same
// directory, which is synced, closed and renamed over the target, and
// the directory is synced so the rename itself is durable. Readers see
// either the old file or the whole new one.
package atomicfile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
)

// TempMarker is part of every temporary file's name,
// "." + base + TempMarker + random, so that a writer that crashed can be
// recognised and its leftovers removed.
const TempMarker = ".tmp-"

// Options adjusts Write. The zero value is the default.
type Options struct {
	// BeforeRename, when set, runs after the temporary file is complete
	// and closed and before the rename; an error aborts the write (tests
	// use it to simulate a crash at that point).
	BeforeRename func(tmp string) error
}

// Write creates or replaces path with what fill writes (through a
// buffered writer). A new file gets mode 0644; a replaced one keeps its
// permissions. On any error the temporary file is removed and an
// existing file at path is left as it was; an error from fill is
// returned unchanged.
func Write(path string, fill func(w io.Writer) error, o Options) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%s: not a regular file", path)
		}
		mode = st.Mode().Perm()
	}
	f, err := os.CreateTemp(dir, "."+base+TempMarker+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close() // may already be closed; that error is of no interest
			os.Remove(tmp)
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	if err := fill(w); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if o.BeforeRename != nil {
		if err := o.BeforeRename(tmp); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// WriteBytes is Write of a byte slice.
func WriteBytes(path string, data []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}, Options{})
}

// SyncDir makes a rename in dir durable. Windows cannot sync a directory
// (and does not need to).
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}
