package nn

import (
	"fmt"
	"math/rand/v2"

	"github.com/esper-go/esper/tensor"
)

// MLPOptions configure NewMLP.
type MLPOptions struct {
	// Sizes lists the widths from input to output, at least two entries,
	// all > 0: {784, 256, 10} is Linear(784,256) → activation →
	// Linear(256,10).
	Sizes []int
	// Activation makes the module applied after each hidden Linear; nil
	// means ReLU.
	Activation func() Module
	// Dropout is the probability of the Dropout after each hidden
	// activation; zero means none. Dropout layer i is seeded with
	// DropoutSeed+i.
	Dropout     float64
	DropoutSeed uint64
	// Norm, when set, makes a normalisation module for a hidden width,
	// inserted between each hidden Linear and its activation.
	Norm func(features int) Module
	// NoBias leaves out the biases of the Linear layers.
	NoBias bool
	// DType of the parameters; zero means F32.
	DType tensor.DType
}

// NewMLP returns a multi-layer perceptron as a Sequential: for each hidden
// width Linear, [Norm], Activation, [Dropout]; then the output Linear with
// nothing after it (torchvision.ops.MLP's layout, without a final dropout).
// Children are numbered in that order, so without Norm and Dropout the
// Linear layers are "0", "2", "4", ... The Linear layers draw their
// initial weights from rng in order.
func NewMLP(rng *rand.Rand, o MLPOptions) (*Sequential, error) {
	const name = "MLP"
	if len(o.Sizes) < 2 {
		return nil, optionsErr(name, "Sizes needs at least input and output widths, got %v", o.Sizes)
	}
	if !(o.Dropout >= 0 && o.Dropout <= 1) {
		return nil, optionsErr(name, "Dropout must be in [0, 1], got %v", o.Dropout)
	}
	act := o.Activation
	if act == nil {
		act = func() Module { return &ReLU{} }
	}
	s := NewSequential()
	last := len(o.Sizes) - 2
	for i := 0; i <= last; i++ {
		l, err := NewLinear(rng, LinearOptions{In: o.Sizes[i], Out: o.Sizes[i+1], NoBias: o.NoBias, DType: o.DType})
		if err != nil {
			return nil, fmt.Errorf("nn: MLP layer %d: %w", i, err)
		}
		s.Append(l)
		if i == last {
			break
		}
		if o.Norm != nil {
			s.Append(o.Norm(o.Sizes[i+1]))
		}
		s.Append(act())
		if o.Dropout > 0 {
			s.Append(MustDropout(DropoutOptions{P: o.Dropout, Seed: o.DropoutSeed + uint64(i)}))
		}
	}
	return s, nil
}

// MustMLP is NewMLP that panics on invalid options.
func MustMLP(rng *rand.Rand, o MLPOptions) *Sequential { return must(NewMLP(rng, o)) }
