package tamiyo

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/internal/atomicfile"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tensor/safetensors"
)

// savedPolicy writes a small policy on the test device for the default
// slots and returns it with the file's path.
func savedPolicy(t *testing.T) (*Policy, string) {
	t.Helper()
	p := mustPolicy(t, smallOptions(tensor.F32))
	path := filepath.Join(t.TempDir(), "policy.safetensors")
	require.NoError(t, SavePolicy(path, p, leyline.DefaultSlotConfig()))
	return p, path
}

// TestPolicyCheckpointRoundTrip: a loaded policy (loaded onto the test
// device) has bitwise the saved weights and computes bitwise the same
// outputs; the header records the schema version, options (not the
// device) and slots.
func TestPolicyCheckpointRoundTrip(t *testing.T) {
	p, path := savedPolicy(t)
	// Another seed: the seed is not part of the match.
	o := smallOptions(tensor.F32)
	o.Seed = 99
	o.Device = testdevice.Device(t)
	q, err := LoadPolicy(path, o, leyline.DefaultSlotConfig())
	require.NoError(t, err)
	require.Equal(t, o.Device, q.Device())
	want, got := nn.StateDict(p), nn.StateDict(q)
	require.Equal(t, len(want), len(got))
	for name, w := range want {
		g := got[name]
		require.NotNil(t, g, name)
		require.Equal(t, w.Shape(), g.Shape(), name)
		require.True(t, bytes.Equal(testdevice.Host(t, w).Storage().Bytes(), testdevice.Host(t, g).Storage().Bytes()), "%s differs", name)
	}
	g := mustGraph(t, testInput(t, 3, 1))
	a, err := nn.Eval(p).Run(g)
	require.NoError(t, err)
	b, err := nn.Eval(q).Run(g)
	require.NoError(t, err)
	for h := range a.Logits {
		require.Equal(t, testdevice.F32(t, a.Logits[h].Value), testdevice.F32(t, b.Logits[h].Value))
	}

	h, err := ReadPolicyHeader(path)
	require.NoError(t, err)
	assert.Equal(t, PolicyCheckpointVersion, h.SchemaVersion)
	assert.Equal(t, PolicyVersion, h.PolicyVersion)
	assert.Equal(t, leyline.DefaultSlotConfig().IDs(), h.Slots)
	wantOpts := p.Options()
	wantOpts.Device = tensor.CPU // not recorded
	assert.Equal(t, wantOpts, h.Options)

	// Saving over an existing file replaces it.
	require.NoError(t, SavePolicy(path, q, leyline.DefaultSlotConfig()))
	_, err = LoadPolicy(path, smallOptions(tensor.F32), leyline.DefaultSlotConfig())
	require.NoError(t, err)
}

// rewriteHeader rewrites the checkpoint at path with edit applied to its
// decoded header (the tensors and their checksum unchanged).
func rewriteHeader(t *testing.T, path string, edit func(map[string]any)) {
	t.Helper()
	f, err := safetensors.ReadFile(path)
	require.NoError(t, err)
	var hdr map[string]any
	require.NoError(t, json.Unmarshal([]byte(f.Metadata[PolicyHeaderKey]), &hdr))
	edit(hdr)
	b, err := json.Marshal(hdr)
	require.NoError(t, err)
	require.NoError(t, safetensors.WriteFile(path, f.Tensors, map[string]string{PolicyHeaderKey: string(b)}))
}

// TestPolicyCheckpointRefusesMismatch: another schema version, other
// options or another slot configuration is refused with
// ErrCheckpointMismatch and a message saying what differs.
func TestPolicyCheckpointRefusesMismatch(t *testing.T) {
	_, path := savedPolicy(t)
	three := leyline.DefaultSlotConfig()
	five, err := leyline.SlotConfigForGrid(1, 5)
	require.NoError(t, err)
	wider := smallOptions(tensor.F32)
	wider.Hidden = 32
	f64 := smallOptions(tensor.F64)
	noDrop := smallOptions(tensor.F32)
	noDrop.NoDropout = true

	cases := []struct {
		name  string
		opts  PolicyOptions
		slots leyline.SlotConfig
		want  string
	}{
		{"options", wider, three, "hidden 16"},
		{"dtype", f64, three, "dtype f64"},
		{"dropout", noDrop, three, "dropout 0, dtype"},
		{"slots", smallOptions(tensor.F32), five, "written for slots [r0c0 r0c1 r0c2]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadPolicy(path, c.opts, c.slots)
			require.ErrorIs(t, err, ErrCheckpointMismatch)
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), path)
		})
	}
	t.Run("schema version", func(t *testing.T) {
		rewriteHeader(t, path, func(h map[string]any) { h["schema_version"] = 2 })
		_, err := LoadPolicy(path, smallOptions(tensor.F32), three)
		require.ErrorIs(t, err, ErrCheckpointMismatch)
		assert.Contains(t, err.Error(), "schema version 2")
		_, err = ReadPolicyHeader(path)
		require.ErrorIs(t, err, ErrCheckpointMismatch)
	})
}

// TestPolicyCheckpointRefusesCorrupt: a truncated file, a flipped data
// bit, a file without or with a malformed header, and tensors that do not
// fit the network are refused with ErrCheckpointCorrupt.
func TestPolicyCheckpointRefusesCorrupt(t *testing.T) {
	_, path := savedPolicy(t)
	good, err := os.ReadFile(path)
	require.NoError(t, err)
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o644))
		return p
	}
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)-3] ^= 0x10
	cases := map[string]string{
		"truncated": write("truncated", good[:len(good)-100]),
		"flipped":   write("flipped", flipped),
		"garbage":   write("garbage", []byte("not a checkpoint at all")),
		"empty":     write("empty", nil),
	}
	// A plain safetensors file (an nn.Save) has no policy header.
	plain := filepath.Join(dir, "plain")
	require.NoError(t, nn.Save(plain, mustPolicy(t, smallOptions(tensor.F32)), nil))
	cases["no header"] = plain
	bad := filepath.Join(dir, "bad header")
	require.NoError(t, os.WriteFile(bad, good, 0o644))
	rewriteHeader(t, bad, func(h map[string]any) { h["extra"] = 1 })
	cases["unknown header field"] = bad
	noCRC := filepath.Join(dir, "no crc")
	require.NoError(t, os.WriteFile(noCRC, good, 0o644))
	rewriteHeader(t, noCRC, func(h map[string]any) { delete(h, "tensors_crc32") })
	cases["no checksum"] = noCRC
	// Right header and checksum, tensors of another network: the options
	// in the header claim the small network, the tensors are wider.
	other := filepath.Join(dir, "other tensors")
	wide := smallOptions(tensor.F32)
	wide.Hidden = 32
	require.NoError(t, SavePolicy(other, mustPolicy(t, wide), leyline.DefaultSlotConfig()))
	rewriteHeader(t, other, func(h map[string]any) { h["options"].(map[string]any)["hidden"] = 16 })
	cases["tensors of another network"] = other

	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := LoadPolicy(p, smallOptions(tensor.F32), leyline.DefaultSlotConfig())
			require.ErrorIs(t, err, ErrCheckpointCorrupt)
			assert.Contains(t, err.Error(), p)
		})
	}
	_, err = LoadPolicy(filepath.Join(dir, "missing"), smallOptions(tensor.F32), leyline.DefaultSlotConfig())
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestSavePolicyIsAtomic: a write that fails before its rename leaves the
// previous file intact and no temporary file behind.
func TestSavePolicyIsAtomic(t *testing.T) {
	p, path := savedPolicy(t)
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	testHookBeforeRename = func(string) error { return errors.New("simulated crash") }
	defer func() { testHookBeforeRename = nil }()
	err = SavePolicy(path, p, testSlots(t, 5))
	require.ErrorContains(t, err, "simulated crash")
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, before, after)
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	for _, e := range entries {
		assert.False(t, strings.Contains(e.Name(), atomicfile.TempMarker), "left %s", e.Name())
	}
	require.Error(t, SavePolicy(path, nil, leyline.DefaultSlotConfig()))
	require.Error(t, SavePolicy(path, p, leyline.SlotConfig{}))
}
