package nissa

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDirBackendNamingAndCollisions(t *testing.T) {
	root := filepath.Join(t.TempDir(), "runs")
	at := time.Date(2025, 11, 26, 9, 5, 7, 0, time.Local)
	now := func() time.Time { return at }
	want := []string{
		"telemetry_2025-11-26_090507",
		"telemetry_2025-11-26_090507_001",
		"telemetry_2025-11-26_090507_002",
	}
	for _, name := range want {
		d, err := NewDirBackend(root, DirOptions{Now: now})
		require.NoError(t, err)
		assert.Equal(t, filepath.Join(root, name), d.Dir())
		assert.Equal(t, filepath.Join(root, name, "events.jsonl"), d.Path())
		fi, err := os.Stat(d.Dir())
		require.NoError(t, err)
		assert.True(t, fi.IsDir())
	}
}

func TestDirBackendDefaultClockAndEvents(t *testing.T) {
	root := t.TempDir()
	d, err := NewDirBackend(root, DirOptions{})
	require.NoError(t, err)
	assert.Equal(t, "dir", d.Name())
	assert.Regexp(t, regexp.MustCompile(`^telemetry_\d{4}-\d{2}-\d{2}_\d{6}(_\d{3})?$`), filepath.Base(d.Dir()))

	h := NewHub(HubOptions{})
	require.NoError(t, h.AddBackend(d))
	for range 3 {
		h.Emit(msgEvent("x"))
	}
	require.NoError(t, h.Flush(flushCtx(t, longWait)))
	assert.Len(t, readLines(t, d.Path()), 3, "Hub.Flush reaches the buffered file")
	h.Emit(msgEvent("x"))
	require.NoError(t, h.Close(longWait))
	assert.Len(t, readLines(t, d.Path()), 4, "Close flushes")
}

func TestDirBackendRootIsAFile(t *testing.T) {
	root := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(root, nil, 0o644))
	_, err := NewDirBackend(root, DirOptions{})
	assert.Error(t, err)
}
