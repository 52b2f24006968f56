package nissa

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
)

// TestJSONLWritesWholeLines: whenever the buffer spills into the file, it
// spills whole rows, so a process killed between two writes never leaves
// half a row behind.
func TestJSONLWritesWholeLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	j := NewJSONLBackend(path, JSONLOptions{FlushEvery: 1 << 20}) // only the buffer's own spills
	require.NoError(t, j.Start())
	defer j.Close()
	spills := 0
	for i := range 300 {
		ev := msgEvent(strings.Repeat("x", 37*(i%7))) // rows of varied length
		require.NoError(t, j.Emit(ev))
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		if len(data) > 0 {
			spills++
			require.Equal(t, byte('\n'), data[len(data)-1], "after event %d the file ends inside a row", i)
		}
	}
	require.Positive(t, spills, "the buffer never spilled: the test tests nothing")
	// A row longer than the whole buffer goes out whole too.
	require.NoError(t, j.Emit(msgEvent(strings.Repeat("y", 10000))))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, byte('\n'), data[len(data)-1])
}

// writeRows writes rows (each given without its newline) and a torn tail.
func writeRows(t *testing.T, path string, rows []string, torn string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(rows, "\n")+"\n"+torn), 0o644))
}

// TestRepairJSONL: the file is cut back to the bytes to keep and then to
// its last whole line; a negative keep only drops a torn last line; a
// file shorter than keep is reported.
func TestRepairJSONL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	rows := []string{`{"a":1}`, `{"b":22}`, `{"c":333}`}
	firstTwo := int64(len(rows[0]) + len(rows[1]) + 2)

	writeRows(t, path, rows, `{"d":44`)
	rep, err := RepairJSONL(path, -1)
	require.NoError(t, err)
	assert.Equal(t, JSONLRepair{Dropped: 7, Lines: 1}, rep)
	assert.Equal(t, strings.Join(rows, "\n")+"\n", readFile(t, path))

	rep, err = RepairJSONL(path, -1)
	require.NoError(t, err)
	assert.Zero(t, rep, "an intact file is left alone")

	writeRows(t, path, rows, `{"d":44`)
	rep, err = RepairJSONL(path, firstTwo)
	require.NoError(t, err)
	assert.Equal(t, JSONLRepair{Dropped: int64(len(rows[2])) + 1 + 7, Lines: 2}, rep)
	assert.Equal(t, rows[0]+"\n"+rows[1]+"\n", readFile(t, path))

	writeRows(t, path, rows, "")
	rep, err = RepairJSONL(path, firstTwo+3) // inside the third row
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(readFile(t, path), "\n"))
	assert.Equal(t, 1, rep.Lines)

	writeRows(t, path, rows, `{"torn`)
	rep, err = RepairJSONL(path, 1000)
	require.NoError(t, err)
	assert.True(t, rep.Short)
	assert.Equal(t, 1, rep.Lines)
	assert.Equal(t, strings.Join(rows, "\n")+"\n", readFile(t, path))

	require.NoError(t, os.WriteFile(path, []byte("no newline at all"), 0o644))
	_, err = RepairJSONL(path, -1)
	require.NoError(t, err)
	assert.Empty(t, readFile(t, path))

	_, err = RepairJSONL(filepath.Join(t.TempDir(), "missing.jsonl"), 0)
	assert.Error(t, err)
}

// TestReadJSONLSkipsATornLastLine: the events of the whole lines come
// back and a torn last one is reported, not an error; a broken line in
// the middle is an error naming it.
func TestReadJSONLSkipsATornLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	var b bytes.Buffer
	for _, ev := range sampleEvents() {
		row, err := json.Marshal(ev)
		require.NoError(t, err)
		b.Write(append(row, '\n'))
	}
	whole := b.Len()
	row, err := json.Marshal(msgEvent("last"))
	require.NoError(t, err)
	b.Write(row[:len(row)/2])
	require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))

	evs, torn, err := ReadJSONL(path)
	require.NoError(t, err)
	assert.True(t, torn)
	require.Len(t, evs, 2)
	assert.Equal(t, leyline.EventSeedGerminated, evs[0].Type)

	require.NoError(t, os.WriteFile(path, b.Bytes()[:whole], 0o644))
	evs, torn, err = ReadJSONL(path)
	require.NoError(t, err)
	assert.False(t, torn)
	assert.Len(t, evs, 2)

	require.NoError(t, os.WriteFile(path, append([]byte("{broken\n"), b.Bytes()[:whole]...), 0o644))
	_, _, err = ReadJSONL(path)
	assert.ErrorContains(t, err, "line 1")
}

// TestOpenDirBackendContinuesARun: a run directory reopened appends to
// its events.jsonl.
func TestOpenDirBackendContinuesARun(t *testing.T) {
	d, err := NewDirBackend(t.TempDir(), DirOptions{})
	require.NoError(t, err)
	require.NoError(t, d.Start())
	require.NoError(t, d.Emit(msgEvent("first")))
	require.NoError(t, d.Close())

	again, err := OpenDirBackend(d.Dir(), DirOptions{})
	require.NoError(t, err)
	assert.Equal(t, d.Path(), again.Path())
	require.NoError(t, again.Start())
	require.NoError(t, again.Emit(msgEvent("second")))
	require.NoError(t, again.Close())
	evs, torn, err := ReadJSONL(d.Path())
	require.NoError(t, err)
	assert.False(t, torn)
	require.Len(t, evs, 2)
	assert.Equal(t, "second", evs[1].Message)

	_, err = OpenDirBackend(filepath.Join(d.Dir(), "missing"), DirOptions{})
	assert.Error(t, err)
	_, err = OpenDirBackend(d.Path(), DirOptions{})
	assert.ErrorContains(t, err, "not a directory")
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
