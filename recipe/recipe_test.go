package recipe

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/data"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tamiyo"
	"github.com/esper-go/esper/tolaria"
)

// TestNewModelSlotPerBlock: the CNN host has one slot before each
// block's pool, and the model lives on the requested device.
func TestNewModelSlotPerBlock(t *testing.T) {
	train, _, err := LoadTask("synthetic", "", 64, 16, 3)
	require.NoError(t, err)
	dev := testdevice.Device(t)
	m, err := NewModel(train, ModelOptions{Blocks: 3, BaseChannels: 4, Kernel: 1, Seed: 3, Device: dev})
	require.NoError(t, err)
	assert.Len(t, m.SlotIDs(), 3)
	d, err := nn.Device(m)
	require.NoError(t, err)
	assert.Equal(t, dev, d)
	_, _, err = LoadTask("cifar", "", 0, 0, 1)
	assert.ErrorContains(t, err, "unknown task")
}

// TestNewController: none is no controller; heuristic and gnn are
// tracked controllers; a policy for other slots and a missing file are
// *PolicyError; an unknown kind is an error.
func TestNewController(t *testing.T) {
	m, err := NewModel(nil, ModelOptions{Blocks: 2, BaseChannels: 4, Kernel: 1, Seed: 1, Device: testdevice.Device(t)})
	require.NoError(t, err)
	c, err := NewController(m, ControllerOptions{Kind: "none"})
	require.NoError(t, err)
	assert.Nil(t, c)
	c, err = NewController(m, ControllerOptions{Kind: "heuristic"})
	require.NoError(t, err)
	assert.IsType(t, &tamiyo.Tracked{}, c)

	p, err := tamiyo.NewPolicy(tamiyo.PolicyOptions{Hidden: 8, GATHidden: 8, GATHeads: 1, HeadHidden: 8})
	require.NoError(t, err)
	dir := t.TempDir()
	two, err := leyline.NewSlotConfig(m.SlotIDs()...)
	require.NoError(t, err)
	good := filepath.Join(dir, "two.safetensors")
	require.NoError(t, tamiyo.SavePolicy(good, p, two))
	c, err = NewController(m, ControllerOptions{Kind: "gnn", Policy: good, Epochs: 10})
	require.NoError(t, err)
	assert.NotNil(t, c)

	three, err := leyline.NewSlotConfig("r0c0", "r0c1", "r0c2")
	require.NoError(t, err)
	bad := filepath.Join(dir, "three.safetensors")
	require.NoError(t, tamiyo.SavePolicy(bad, p, three))
	var pe *PolicyError
	_, err = NewController(m, ControllerOptions{Kind: "gnn", Policy: bad})
	require.ErrorAs(t, err, &pe)
	_, err = NewController(m, ControllerOptions{Kind: "gnn", Policy: filepath.Join(dir, "missing.safetensors")})
	require.ErrorAs(t, err, &pe)
	_, err = NewController(m, ControllerOptions{Kind: "rules"})
	assert.ErrorContains(t, err, "unknown controller")
}

// TestShippedPolicy: the shipped policy loads for the default task's
// host, acts deterministically (two runs of the same seed make the same
// decisions), and grows the host; a host with other slots refuses it.
func TestShippedPolicy(t *testing.T) {
	run := func() []string {
		train, test, err := LoadTask("synthetic", "", 512, 100, 5)
		require.NoError(t, err)
		m, err := NewModel(train, ModelOptions{Blocks: 2, BaseChannels: 4, Kernel: 1, Seed: 5, Device: testdevice.Device(t)})
		require.NoError(t, err)
		ctl, err := NewController(m, ControllerOptions{Kind: "gnn", Seed: 5, Epochs: 6})
		require.NoError(t, err)
		tl, err := data.NewLoader(train, data.LoaderOptions{BatchSize: 128, Shuffle: true, Seed: 5, DropLast: true})
		require.NoError(t, err)
		vl, err := data.NewLoader(test, data.LoaderOptions{BatchSize: 100})
		require.NoError(t, err)
		defer tl.Close()
		defer vl.Close()
		tr, err := tolaria.NewTrainer(tolaria.TrainerOptions{Model: m, Train: tl, Val: vl, Epochs: 6, Controller: ctl})
		require.NoError(t, err)
		sum, err := tr.Fit(context.Background())
		require.NoError(t, err)
		var ds []string
		for _, r := range sum.Epochs {
			ds = append(ds, r.DecisionText())
		}
		require.Positive(t, sum.Germinated, "the shipped policy grows the host: %v", ds)
		return ds
	}
	require.Equal(t, run(), run())

	three, err := NewModel(nil, ModelOptions{Blocks: 3, BaseChannels: 4, Kernel: 1, Seed: 1})
	require.NoError(t, err)
	var pe *PolicyError
	_, err = NewController(three, ControllerOptions{Kind: "gnn"})
	require.ErrorAs(t, err, &pe)
	require.ErrorContains(t, err, "shipped policy")
}
