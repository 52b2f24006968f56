package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestAbsurdSizesAreOneLine: sizes that used to crash the process (out of
// memory, a makeslice panic, an "internal error" from a Linear of 0
// outputs) are refused with one line and exit 1, before any training.
func TestAbsurdSizesAreOneLine(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "policy.safetensors")
	hdr := `{"schema_version":1,"options":{"gat_hidden":4294967296,"gat_heads":4294967296,"dtype":"F32"},"slots":["r0c0","r0c1","r0c2"],"tensors_crc32":0}`
	meta := `{"__metadata__":{"esper.tamiyo.policy":"` + escapeJSON(hdr) + `"}}`
	file := append(binary.LittleEndian.AppendUint64(nil, uint64(len(meta))), meta...)
	assert.NoError(t, os.WriteFile(policy, file, 0o644))
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"train", "--base-channels", "1000000", "--epochs", "1", "--baseline=false"}, "parameters too large"},
		{[]string{"ppo", "--hidden", "1000000", "--rounds", "1"}, "a width above 65536"},
		{[]string{"ppo", "--gat-heads", "4294967296", "--gat-hidden", "4294967296", "--rounds", "1"}, "a width above 65536"},
		{[]string{"train", "--controller", "gnn", "--blocks", "3", "--policy", policy, "--epochs", "1", "--baseline=false"}, "corrupt policy checkpoint"},
	} {
		var out, errb bytes.Buffer
		code := run(append(tc.args, "--run-dir", t.TempDir()), &out, &errb)
		assert.Equal(t, 1, code, "%v: %s", tc.args, errb.String())
		assert.Contains(t, errb.String(), tc.msg, "%v", tc.args)
		assert.NotContains(t, errb.String(), "internal error", "%v", tc.args)
	}
}

func escapeJSON(s string) string {
	var b bytes.Buffer
	for _, c := range []byte(s) {
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return b.String()
}
