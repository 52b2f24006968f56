package safetensors

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/esper-go/esper/tensor"
)

// entries lists a directory's file names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func requireOnly(t *testing.T, dir string, want ...string) {
	t.Helper()
	got := entries(t, dir)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("directory holds %v, want exactly %v (temporary file left behind?)", got, want)
	}
}

func TestWriteReadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	in := sampleTensors()
	meta := map[string]string{"epoch": "3"}
	if err := WriteFile(path, in, meta); err != nil {
		t.Fatal(err)
	}
	requireOnly(t, dir, "model.safetensors")
	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, f, in, meta)
	if runtime.GOOS != "windows" {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o644 {
			t.Errorf("new file mode %v, want 0644", st.Mode().Perm())
		}
	}

	// The bytes on disk are those of Encode.
	var b bytes.Buffer
	if err := Encode(&b, in, meta); err != nil {
		t.Fatal(err)
	}
	disk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(disk, b.Bytes()) {
		t.Error("file bytes differ from Encode output")
	}

	// Overwriting replaces the content and keeps the file's mode.
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	small := map[string]*tensor.Tensor{"x": tensor.Scalar(tensor.F64, 1)}
	if err := WriteFile(path, small, nil); err != nil {
		t.Fatal(err)
	}
	requireOnly(t, dir, "model.safetensors")
	f, err = ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, f, small, nil)
	if st, _ := os.Stat(path); runtime.GOOS != "windows" && st.Mode().Perm() != 0o600 {
		t.Errorf("replaced file mode %v, want 0600 kept", st.Mode().Perm())
	}
}

func TestWriteFileRelativePath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := WriteFile("rel.safetensors", map[string]*tensor.Tensor{"a": tensor.Zeros(tensor.I32, 2)}, nil); err != nil {
		t.Fatal(err)
	}
	requireOnly(t, dir, "rel.safetensors")
	if _, err := ReadFile("rel.safetensors"); err != nil {
		t.Fatal(err)
	}
}

// writeOld puts a valid file at path and returns its bytes.
func writeOld(t *testing.T, path string) []byte {
	t.Helper()
	if err := WriteFile(path, map[string]*tensor.Tensor{"old": tensor.FromSlice([]float32{1, 2, 3})}, map[string]string{"v": "1"}); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return old
}

func requireUnchanged(t *testing.T, path string, old []byte) {
	t.Helper()
	now, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(now, old) {
		t.Fatal("the old file was modified by a failed write")
	}
	if _, err := ReadFile(path); err != nil {
		t.Fatalf("old file no longer reads: %v", err)
	}
}

func TestWriteFileFailureKeepsOldFile(t *testing.T) {
	t.Run("encode error", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "ckpt.safetensors")
		old := writeOld(t, path)
		err := WriteFile(path, map[string]*tensor.Tensor{"a": tensor.Zeros(tensor.F32, 2), "bad": nil}, nil)
		if err == nil || err.Error() != `safetensors: tensor "bad" is nil` {
			t.Fatalf("error %v", err)
		}
		requireUnchanged(t, path, old)
		requireOnly(t, dir, "ckpt.safetensors")
	})
	t.Run("failure after the temporary file is complete", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "ckpt.safetensors")
		old := writeOld(t, path)
		injected := errors.New("injected crash before rename")
		var sawTmp string
		testHookBeforeRename = func(tmp string) error {
			sawTmp = tmp
			if filepath.Dir(tmp) != filepath.Clean(dir) {
				t.Errorf("temporary file %s is not in the target's directory", tmp)
			}
			// The temporary file is complete and valid at this point.
			if _, err := ReadFile(tmp); err != nil {
				t.Errorf("temporary file before rename: %v", err)
			}
			return injected
		}
		defer func() { testHookBeforeRename = nil }()
		err := WriteFile(path, sampleTensors(), nil)
		if !errors.Is(err, injected) || !strings.Contains(err.Error(), "safetensors: write "+path) {
			t.Fatalf("error %v", err)
		}
		if sawTmp == "" {
			t.Fatal("hook not called")
		}
		requireUnchanged(t, path, old)
		requireOnly(t, dir, "ckpt.safetensors")
	})
	t.Run("read-only directory", func(t *testing.T) {
		if runtime.GOOS == "windows" || os.Geteuid() == 0 {
			t.Skip("directory permissions do not bind root (or Windows)")
		}
		dir := t.TempDir()
		path := filepath.Join(dir, "ckpt.safetensors")
		old := writeOld(t, path)
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o700)
		if err := WriteFile(path, sampleTensors(), nil); err == nil {
			t.Fatal("write into a read-only directory succeeded")
		}
		requireUnchanged(t, path, old)
		requireOnly(t, dir, "ckpt.safetensors")
	})
	t.Run("missing directory", func(t *testing.T) {
		err := WriteFile(filepath.Join(t.TempDir(), "no", "such", "x.safetensors"), sampleTensors(), nil)
		if err == nil || !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("target is a directory", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := WriteFile(filepath.Join(dir, "d"), sampleTensors(), nil); err == nil {
			t.Fatal("writing over a directory succeeded")
		}
		requireOnly(t, dir, "d")
	})
}

func TestReadFileErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadFile(filepath.Join(dir, "missing.safetensors")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := ReadFile(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
	path := filepath.Join(dir, "model.st")
	if err := os.WriteFile(path, validFile(t)[:40], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadFile(path)
	var fe *FormatError
	if !errors.As(err, &fe) || fe.File != path {
		t.Fatalf("truncated file: %v", err)
	}
	if !strings.HasPrefix(err.Error(), "safetensors: "+path+": offset ") {
		t.Errorf("error %q does not name the file", err)
	}
}
