package main

// Checks a command makes of its output paths and of the files it will
// need before its work starts, so that a run never trains or measures for
// minutes and then fails on something it could have checked first.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// checkOutputDir makes sure that dir exists (creating it when create is
// set) and takes new files. The error names the flag that gave dir.
func checkOutputDir(flag, dir string, create bool) error {
	if create {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("%s %s: cannot create the directory: %v", flag, dir, pathErr(err))
		}
	}
	if err := probeDir(dir); err != nil {
		return fmt.Errorf("%s %s: cannot write in the directory: %v", flag, dir, err)
	}
	return nil
}

// checkOutputFile makes sure that the file path can be written: it is not
// a directory, and its directory, which must exist, takes new files.
func checkOutputFile(flag, path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s %s: is a directory", flag, path)
	}
	dir := filepath.Dir(path)
	if err := probeDir(dir); err != nil {
		return fmt.Errorf("%s %s: cannot write in %s: %v", flag, path, dir, err)
	}
	return nil
}

// probeDir creates and removes a file in dir: permissions, a read-only
// file system or a path that is no directory all show up as they would
// when the output is written. The error is the reason alone.
func probeDir(dir string) error {
	f, err := os.CreateTemp(dir, ".esper-probe-*")
	if err != nil {
		return pathErr(err)
	}
	name := f.Name()
	f.Close()
	return pathErr(os.Remove(name))
}

// pathErr is the reason of a path error ("not a directory", "read-only
// file system"), without the probe's name; other errors are returned as
// they are.
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
