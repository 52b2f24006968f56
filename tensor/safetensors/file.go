package safetensors

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/esper-go/esper/tensor"
)

// testHookBeforeRename, when set by a test, runs after the temporary file
// is written and synced and before it is renamed; an error aborts the
// write.
var testHookBeforeRename func(tmp string) error

// WriteFile writes tensors and metadata to path atomically: it encodes
// into a temporary file in the same directory, syncs and closes it,
// renames it over path and syncs the directory. On any error the
// temporary file is removed and an existing file at path is left as it
// was. A new file gets mode 0644; a replaced one keeps its mode.
func WriteFile(path string, tensors map[string]*tensor.Tensor, metadata map[string]string) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		if !st.Mode().IsRegular() {
			return fmt.Errorf("safetensors: %s: not a regular file", path)
		}
		mode = st.Mode().Perm()
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	tmp := f.Name()
	encodeFailed := false
	defer func() {
		if err != nil {
			f.Close() // may already be closed; the error is of no interest
			os.Remove(tmp)
		}
	}()
	defer func() {
		if err != nil && !encodeFailed {
			err = fmt.Errorf("safetensors: write %s: %w", path, err)
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	if err := Encode(w, tensors, metadata); err != nil {
		encodeFailed = true // already says "safetensors: ..."
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
	if testHookBeforeRename != nil {
		if err := testHookBeforeRename(tmp); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable. Windows cannot sync a directory
// (and does not need to).
func syncDir(dir string) error {
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
