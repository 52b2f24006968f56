package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteReplacesWholeOrNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	if err := WriteBytes(path, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	// A failing fill leaves the old file and no temporary behind.
	boom := errors.New("boom")
	err := Write(path, func(w io.Writer) error {
		io.WriteString(w, "partial")
		return boom
	}, Options{})
	if !errors.Is(err, boom) {
		t.Fatalf("Write = %v, want the fill error", err)
	}
	// A crash just before the rename: the same.
	err = Write(path, func(w io.Writer) error { _, err := io.WriteString(w, "two"); return err },
		Options{BeforeRename: func(tmp string) error {
			if !strings.Contains(filepath.Base(tmp), TempMarker) {
				t.Errorf("temporary %s lacks %q", tmp, TempMarker)
			}
			return boom
		}})
	if !errors.Is(err, boom) {
		t.Fatalf("Write = %v, want the hook error", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "one" {
		t.Fatalf("file = %q after failed writes, want %q", got, "one")
	}
	if err := WriteBytes(path, []byte("three")); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	st, _ := os.Stat(path)
	if string(got) != "three" || st.Mode().Perm() != 0o600 {
		t.Fatalf("file = %q mode %v, want %q and the kept mode 0600", got, st.Mode().Perm(), "three")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the file", len(entries))
	}
	if err := WriteBytes(dir, []byte("x")); err == nil {
		t.Fatal("replacing a directory succeeded")
	}
}
