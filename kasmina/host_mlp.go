package kasmina

import (
	"fmt"
	"math/rand/v2"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// MLPHostOptions configure an MLPHost.
type MLPHostOptions struct {
	// InFeatures is the flattened input width (C·H·W for images);
	// required, > 0.
	InFeatures int
	// Classes is the width of the output logits; zero means 10.
	Classes int
	// Hidden is the width of every block; zero means 128.
	Hidden int
	// Blocks is the number of Linear-LayerNorm-ReLU blocks; zero means 3.
	Blocks int
	// RNG initialises the weights; nil means tensor.NewRNG(0).
	RNG *rand.Rand
	// DType of the parameters; zero means F32.
	DType tensor.DType
}

// MLPHost is a host over flat features: Blocks blocks of Linear →
// LayerNorm → ReLU of width Hidden, then a Linear classifier. Slot r0c{i}
// (BLOCK_END) sits after block i. Inputs of rank above 2 ([N, C, H, W])
// are flattened to [N, C·H·W] first.
type MLPHost struct {
	hostBase
	opts MLPHostOptions
}

// mlpBlock is Linear → LayerNorm → ReLU.
type mlpBlock struct {
	nn.Composite
	linear *nn.Linear
	norm   *nn.LayerNorm
	// flatten is set on block 0, which takes the raw input.
	flatten bool
}

func (b *mlpBlock) Forward(x *autograd.Var) *autograd.Var {
	if b.flatten && x.Value.Rank() > 2 {
		x = autograd.Flatten(x, 1)
	}
	return autograd.Relu(b.norm.Forward(b.linear.Forward(x)))
}

// NewMLPHost builds an MLPHost; invalid options are an error.
func NewMLPHost(o MLPHostOptions) (*MLPHost, error) {
	if o.Classes == 0 {
		o.Classes = 10
	}
	if o.Hidden == 0 {
		o.Hidden = 128
	}
	if o.Blocks == 0 {
		o.Blocks = 3
	}
	if o.RNG == nil {
		o.RNG = tensor.NewRNG(0)
	}
	if o.InFeatures <= 0 || o.Classes < 0 || o.Hidden < 0 || o.Blocks < 0 {
		return nil, fmt.Errorf("kasmina: MLPHost: InFeatures must be > 0 and no option negative, got %+v", o)
	}
	h := &MLPHost{opts: o}
	blocks := nn.NewSequential()
	in := o.InFeatures
	for i := range o.Blocks {
		lin, err := nn.NewLinear(o.RNG, nn.LinearOptions{In: in, Out: o.Hidden, DType: o.DType})
		if err != nil {
			return nil, fmt.Errorf("kasmina: MLPHost block %d: %w", i, err)
		}
		ln, err := nn.NewLayerNorm(nn.LayerNormOptions{Shape: []int{o.Hidden}, DType: o.DType})
		if err != nil {
			return nil, fmt.Errorf("kasmina: MLPHost block %d: %w", i, err)
		}
		b := &mlpBlock{linear: lin, norm: ln, flatten: i == 0}
		b.Register("linear", lin)
		b.Register("norm", ln)
		blocks.Append(b)
		id := leyline.FormatSlotID(0, i)
		pos := 1.0
		if o.Blocks > 1 {
			pos = float64(i) / float64(o.Blocks-1)
		}
		h.specs = append(h.specs, leyline.InjectionSpec{
			SlotID: id, Channels: o.Hidden, Position: pos, LayerStart: i, LayerEnd: i,
			Surface: leyline.SurfaceBlockEnd, Order: i, Row: 0, Col: i,
		})
		h.blocks = append(h.blocks, leyline.BlockInfo{Depth: i, Channels: o.Hidden, Slots: []string{id}})
		h.segments.cuts = append(h.segments.cuts, id)
		h.segments.steps = append(h.segments.steps, b.Forward)
		in = o.Hidden
	}
	classifier, err := nn.NewLinear(o.RNG, nn.LinearOptions{In: in, Out: o.Classes, DType: o.DType})
	if err != nil {
		return nil, fmt.Errorf("kasmina: MLPHost classifier: %w", err)
	}
	h.Register("blocks", blocks)
	h.Register("classifier", classifier)
	h.segments.head = classifier
	h.segments.features = func(x *autograd.Var) *autograd.Var {
		if x.Value.Rank() > 2 { // no blocks: the raw input reaches the head
			x = autograd.Flatten(x, 1)
		}
		return x
	}
	return h, nil
}

// MustMLPHost is NewMLPHost that panics on invalid options.
func MustMLPHost(o MLPHostOptions) *MLPHost {
	h, err := NewMLPHost(o)
	if err != nil {
		panic(err)
	}
	return h
}

// Options returns the options the host was built with (defaults filled).
func (h *MLPHost) Options() MLPHostOptions { return h.opts }

// Topology returns "mlp".
func (h *MLPHost) Topology() string { return TopologyMLP }
