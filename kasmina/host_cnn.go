package kasmina

import (
	"fmt"
	"math/rand/v2"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// CNNHostOptions configure a CNNHost. The zero value is the reference's
// default host: 3 input channels, 10 classes, 3 blocks of 32/64/128
// channels, each followed by a 2×2 max-pool, 3×3 kernels.
type CNNHostOptions struct {
	// InChannels of the input images; zero means 3 (use 1 for 1×28×28).
	InChannels int
	// Classes is the width of the output logits; zero means 10.
	Classes int
	// Blocks is the number of Conv-BN-ReLU blocks; zero means 3, and at
	// least 2 are required (G2 CNNHost n_blocks ≥ 2).
	Blocks int
	// BaseChannels is the width of block 0; block i has
	// BaseChannels·2^i. Zero means 32.
	BaseChannels int
	// PoolLayers is the number of leading blocks followed by a 2×2
	// max-pool (and a POST_POOL slot); zero means Blocks, −1 means no
	// pooling. Values above Blocks are capped at Blocks.
	PoolLayers int
	// KernelSize of the convolutions (padding KernelSize/2); zero means
	// 3.
	KernelSize int
	// RNG initialises the weights; nil means tensor.NewRNG(0).
	RNG *rand.Rand
	// DType of the parameters; zero means F32.
	DType tensor.DType
}

// CNNHost is the G2 convolutional host. Block i is Conv2d (no bias,
// padding KernelSize/2) → BatchNorm2d → ReLU, followed by a 2×2 max-pool
// when i < PoolLayers; a global average pool and a Linear classifier
// finish it. Slot r0c{i} (PRE_POOL) sits after block i's ReLU, slot
// r1c{i} (POST_POOL) after its pool.
//
// A pool whose input is already smaller than 2 on a side is skipped (the
// activation passes through unchanged), so the host accepts inputs down
// to 1×1 whatever PoolLayers is; PyTorch's MaxPool2d would raise instead.
type CNNHost struct {
	hostBase
	opts CNNHostOptions
}

// cnnBlock is Conv2d → BatchNorm2d → ReLU.
type cnnBlock struct {
	nn.Composite
	conv *nn.Conv2d
	bn   *nn.BatchNorm2d
}

// Forward is relu(bn(conv(x))); in inference with the BatchNorm in eval
// mode the three are one fused convolution (nn.ConvBNRelu).
func (b *cnnBlock) Forward(x *autograd.Var) *autograd.Var {
	return nn.ConvBNRelu(b.conv, b.bn, x)
}

// NewCNNHost builds a CNNHost; invalid options are an error.
func NewCNNHost(o CNNHostOptions) (*CNNHost, error) {
	if o.InChannels == 0 {
		o.InChannels = 3
	}
	if o.Classes == 0 {
		o.Classes = 10
	}
	if o.Blocks == 0 {
		o.Blocks = 3
	}
	if o.BaseChannels == 0 {
		o.BaseChannels = 32
	}
	switch {
	case o.PoolLayers == 0:
		o.PoolLayers = o.Blocks
	case o.PoolLayers == -1:
		o.PoolLayers = 0
	case o.PoolLayers > o.Blocks:
		o.PoolLayers = o.Blocks
	}
	if o.KernelSize == 0 {
		o.KernelSize = 3
	}
	if o.RNG == nil {
		o.RNG = tensor.NewRNG(0)
	}
	switch {
	case o.Blocks < 2:
		return nil, fmt.Errorf("kasmina: CNNHost needs at least 2 blocks, got %d", o.Blocks)
	case o.Blocks > 16:
		return nil, fmt.Errorf("kasmina: CNNHost: %d blocks would need %d·2^%d channels", o.Blocks, o.BaseChannels, o.Blocks-1)
	case o.InChannels < 0 || o.Classes < 0 || o.BaseChannels < 0 || o.KernelSize < 0:
		return nil, fmt.Errorf("kasmina: CNNHost: negative option in %+v", o)
	case o.PoolLayers < 0:
		return nil, fmt.Errorf("kasmina: CNNHost: PoolLayers %d (want ≥ 0, or −1 for none)", o.PoolLayers)
	}
	h := &CNNHost{opts: o}
	blocks := nn.NewSequential()
	convs := make([]*cnnBlock, o.Blocks)
	in := o.InChannels
	for i := range o.Blocks {
		out := o.BaseChannels << i
		conv, err := nn.NewConv2d(o.RNG, nn.Conv2dOptions{
			InChannels: in, OutChannels: out, KernelH: o.KernelSize,
			Padding: o.KernelSize / 2, NoBias: true, DType: o.DType,
		})
		if err != nil {
			return nil, fmt.Errorf("kasmina: CNNHost block %d: %w", i, err)
		}
		bn, err := nn.NewBatchNorm2d(nn.BatchNorm2dOptions{Channels: out, DType: o.DType})
		if err != nil {
			return nil, fmt.Errorf("kasmina: CNNHost block %d: %w", i, err)
		}
		b := &cnnBlock{conv: conv, bn: bn}
		b.Register("conv", conv)
		b.Register("bn", bn)
		blocks.Append(b)
		convs[i] = b
		in = out
	}
	classifier, err := nn.NewLinear(o.RNG, nn.LinearOptions{In: in, Out: o.Classes, DType: o.DType})
	if err != nil {
		return nil, fmt.Errorf("kasmina: CNNHost classifier: %w", err)
	}
	h.Register("blocks", blocks)
	h.Register("classifier", classifier)

	pool := nn.MustMaxPool2d(nn.Pool2dOptions{Kernel: 2})
	poolStep := func(x *autograd.Var) *autograd.Var {
		if s := x.Shape(); len(s) == 4 && (s[2] < 2 || s[3] < 2) {
			return x
		}
		return pool.Forward(x)
	}
	gap := &nn.GlobalAvgPool{}
	positions := 2*o.Blocks - 1
	if positions < 1 {
		positions = 1
	}
	for i := range o.Blocks {
		ch := o.BaseChannels << i
		info := leyline.BlockInfo{Depth: i, Channels: ch}
		pre := leyline.InjectionSpec{
			SlotID: leyline.FormatSlotID(0, i), Channels: ch,
			Position: float64(2*i) / float64(positions), LayerStart: i, LayerEnd: i,
			Surface: leyline.SurfacePrePool, Order: i, Row: 0, Col: i,
		}
		h.segments.cuts = append(h.segments.cuts, pre.SlotID)
		h.segments.steps = append(h.segments.steps, convs[i].Forward)
		h.segments.fused = append(h.segments.fused, nil)
		info.Slots = append(info.Slots, pre.SlotID)
		h.specs = append(h.specs, pre)
		if i < o.PoolLayers {
			// A run that passes the empty pre-pool slot pools in the
			// batch norm's pass (nn.ConvBNReluMaxPool).
			b := convs[i]
			h.segments.fused[len(h.segments.fused)-1] = func(x *autograd.Var) *autograd.Var {
				if s := x.Shape(); len(s) == 4 {
					p := b.conv.Params().Norm()
					co := b.conv.Options()
					ho := kernels.ConvOut(s[2], co.KernelH, p.StrideH, p.PadH, p.DilationH)
					wo := kernels.ConvOut(s[3], co.KernelW, p.StrideW, p.PadW, p.DilationW)
					if ho >= 2 && wo >= 2 {
						return nn.ConvBNReluMaxPool(b.conv, b.bn, x)
					}
				}
				return poolStep(b.Forward(x))
			}
			post := leyline.InjectionSpec{
				SlotID: leyline.FormatSlotID(1, i), Channels: ch,
				Position: min(1, float64(2*i+1)/float64(positions)), LayerStart: i, LayerEnd: i,
				Surface: leyline.SurfacePostPool, Order: o.Blocks + i, Row: 1, Col: i,
			}
			h.segments.cuts = append(h.segments.cuts, post.SlotID)
			h.segments.steps = append(h.segments.steps, poolStep)
			h.segments.fused = append(h.segments.fused, nil)
			info.Slots = append(info.Slots, post.SlotID)
			h.specs = append(h.specs, post)
		}
		h.blocks = append(h.blocks, info)
	}
	h.segments.features, h.segments.head = gap.Forward, classifier
	// Action order is row-major: all of row 0, then row 1.
	sortSpecsRowMajor(h.specs)
	return h, nil
}

// MustCNNHost is NewCNNHost that panics on invalid options, for examples
// and tests.
func MustCNNHost(o CNNHostOptions) *CNNHost {
	h, err := NewCNNHost(o)
	if err != nil {
		panic(err)
	}
	return h
}

// Options returns the options the host was built with (defaults filled;
// PoolLayers is the actual number of pooled blocks).
func (h *CNNHost) Options() CNNHostOptions { return h.opts }

// Topology returns "cnn".
func (h *CNNHost) Topology() string { return TopologyCNN }

// sortSpecsRowMajor orders specs by (row, col).
func sortSpecsRowMajor(specs []leyline.InjectionSpec) {
	ids := make([]string, len(specs))
	by := make(map[string]leyline.InjectionSpec, len(specs))
	for i, s := range specs {
		ids[i] = s.SlotID
		by[s.SlotID] = s
	}
	leyline.SortSlotIDs(ids)
	for i, id := range ids {
		specs[i] = by[id]
	}
}
