package nn_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// TestHugeLayersAreErrors: layer sizes that overflow or exceed the
// machine's memory are option errors from the constructors (NewLinear
// with In = 2^40 used to panic inside the allocator).
func TestHugeLayersAreErrors(t *testing.T) {
	rng := tensor.NewRNG(1)
	_, err := nn.NewLinear(rng, nn.LinearOptions{In: 1 << 40, Out: 4})
	assert.ErrorIs(t, err, nn.ErrOptions)
	_, err = nn.NewLinear(rng, nn.LinearOptions{In: 1 << 32, Out: 1 << 32})
	assert.ErrorIs(t, err, nn.ErrOptions)
	_, err = nn.NewConv2d(rng, nn.Conv2dOptions{InChannels: 1000000, OutChannels: 1000000, KernelH: 3})
	assert.ErrorIs(t, err, nn.ErrOptions)
	_, err = nn.NewEmbedding(rng, nn.EmbeddingOptions{Num: 1 << 40, Dim: 1 << 30})
	assert.ErrorIs(t, err, nn.ErrOptions)
	_, err = nn.NewLayerNorm(nn.LayerNormOptions{Shape: []int{1 << 40, 1 << 40}})
	assert.ErrorIs(t, err, nn.ErrOptions)
	_, err = nn.NewBatchNorm2d(nn.BatchNorm2dOptions{Channels: 1 << 62})
	assert.ErrorIs(t, err, nn.ErrOptions)
	_, err = nn.NewGroupNorm(nn.GroupNormOptions{Groups: 1, Channels: 1 << 62})
	assert.ErrorIs(t, err, nn.ErrOptions)
	_, err = nn.NewLinear(rng, nn.LinearOptions{In: 300, Out: 200})
	assert.NoError(t, err, "an ordinary layer still builds")
}

// TestNilModuleIsAnError: Save, Load and LoadStateDict of a nil module
// (or a nil *Linear in the interface) say so instead of a nil-pointer
// panic.
func TestNilModuleIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	var lin *nn.Linear
	for _, m := range []nn.Module{nil, lin} {
		assert.ErrorContains(t, nn.Save(path, m, nil), "nil module")
		assert.ErrorContains(t, nn.Load(path, m), "nil module")
		assert.ErrorContains(t, nn.LoadStateDict(m, nil, true), "nil module")
	}
}
