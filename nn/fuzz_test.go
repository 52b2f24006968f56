package nn_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/esper-go/esper/internal/fuzzcheck"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// fuzzModule is the module the fuzzed checkpoints are loaded into: a
// convolution, a batch norm (with buffers) and a linear layer.
func fuzzModule() nn.Module {
	rng := tensor.NewRNG(3)
	return nn.NewSequential(
		nn.MustConv2d(rng, nn.Conv2dOptions{InChannels: 1, OutChannels: 2, KernelH: 3}),
		nn.MustBatchNorm2d(nn.BatchNorm2dOptions{Channels: 2}),
		nn.MustLinear(rng, nn.LinearOptions{In: 4, Out: 3}),
	)
}

// FuzzLoad feeds nn.Load arbitrary files: it returns an error or loads,
// never panics, and allocates in proportion to the file. The module
// loaded into is on the test device.
func FuzzLoad(f *testing.F) {
	dir := f.TempDir()
	seed := filepath.Join(dir, "seed.safetensors")
	if err := nn.Save(seed, fuzzModule(), map[string]string{"k": "v"}); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(seed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte{})
	m := onDevice(f, fuzzModule())
	path := filepath.Join(dir, "fuzz.safetensors")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		fuzzcheck.Budget(t, "nn.Load", len(data), fuzzcheck.Linear(len(data), 4, 256<<10), func() {
			_ = nn.Load(path, m)
		})
	})
}
