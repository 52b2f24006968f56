package tamiyo

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// TestParameterCountMatchesNetwork: ParameterCount, which the loader
// checks a file's header against, counts exactly the elements of the
// network NewPolicy builds (on the test device), for the defaults and
// for odd widths.
func TestParameterCountMatchesNetwork(t *testing.T) {
	for _, o := range []PolicyOptions{
		{},
		{Hidden: 8, GATHidden: 4, GATHeads: 2, HeadHidden: 6, BlueprintEmbedding: 3},
		{Hidden: 5, GATHidden: 7, GATHeads: 3, HeadHidden: 2, BlueprintEmbedding: 1, DType: tensor.F64},
	} {
		p := mustPolicy(t, o)
		var have int64
		for _, v := range nn.StateDict(p) {
			have += int64(v.Numel())
		}
		want, err := ParameterCount(o)
		require.NoError(t, err)
		assert.Equal(t, have, want, "options %+v", o)
	}
}

// rawPolicyFile writes a safetensors file of no tensors whose metadata
// holds header as the policy header: the crafted files of issue 20.
func rawPolicyFile(t *testing.T, header string) string {
	t.Helper()
	meta := `{"__metadata__":{"esper.tamiyo.policy":` + jsonString(header) + `}}`
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(meta)))
	b = append(b, meta...)
	path := filepath.Join(t.TempDir(), "policy.safetensors")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

func jsonString(s string) string {
	out := []byte{'"'}
	for _, c := range []byte(s) {
		if c == '"' || c == '\\' {
			out = append(out, '\\')
		}
		out = append(out, c)
	}
	return string(append(out, '"'))
}

// TestLoadPolicyRefusesHostileHeaders: a header whose options describe a
// network the file does not hold is refused as corrupt, before anything
// is allocated: widths of 2^32 (which overflowed into a Linear of 0
// outputs), 2^20 and 2^50 (out of memory, a makeslice panic), and 4096
// (2.7 GB for a 120 KB file). The loader allocates less than 1 MiB for
// each.
func TestLoadPolicyRefusesHostileHeaders(t *testing.T) {
	slots := leyline.DefaultSlotConfig()
	for _, opts := range []string{
		`"gat_hidden":4294967296,"gat_heads":4294967296`,
		`"hidden":1048576`,
		`"hidden":1125899906842624`,
		`"hidden":4096`,
		`"gat_hidden":65536,"gat_heads":2`,
	} {
		path := rawPolicyFile(t, `{"schema_version":1,"options":{`+opts+`,"dtype":"F32"},"slots":["r0c0","r0c1","r0c2"],"tensors_crc32":0}`)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := LoadPolicy(path, PolicyOptions{}, slots)
		_, herr := ReadPolicyHeader(path)
		runtime.ReadMemStats(&after)
		require.Error(t, err, opts)
		assert.True(t, errors.Is(err, ErrCheckpointCorrupt), "%s: %v", opts, err)
		assert.True(t, errors.Is(herr, ErrCheckpointCorrupt), "%s: %v", opts, herr)
		assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "%s: bytes allocated", opts)
	}
}

// TestNewPolicyRefusesHugeWidths: the options a command line passes on
// (esper ppo --hidden 1000000, --gat-heads/--gat-hidden 2^32) are refused
// with ErrPolicyOptions instead of crashing.
func TestNewPolicyRefusesHugeWidths(t *testing.T) {
	for _, o := range []PolicyOptions{
		{Hidden: 1000000},
		{GATHidden: 1 << 32, GATHeads: 1 << 32},
		{HeadHidden: MaxPolicyWidth + 1},
		{BlueprintEmbedding: 1 << 40},
		{GATHidden: 1024, GATHeads: 128},
	} {
		_, err := NewPolicy(o)
		assert.ErrorIs(t, err, ErrPolicyOptions, "%+v", o)
	}
	_, err := NewPolicy(PolicyOptions{Hidden: 16, GATHidden: 8, GATHeads: 2, HeadHidden: 8, BlueprintEmbedding: 2})
	assert.NoError(t, err)
}

// TestPolicyHeaderDuplicateKey: a header that gives a key twice is
// corrupt (encoding/json would keep the last one silently).
func TestPolicyHeaderDuplicateKey(t *testing.T) {
	path := rawPolicyFile(t, `{"schema_version":1,"schema_version":1,"options":{"dtype":"F32"},"slots":["r0c0"],"tensors_crc32":0}`)
	_, err := ReadPolicyHeader(path)
	assert.ErrorIs(t, err, ErrCheckpointCorrupt)
	assert.ErrorContains(t, err, "duplicate JSON key")
}
