package nn

import (
	"fmt"
	"math/rand/v2"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/tensor"
)

// EmbeddingOptions configure an Embedding layer.
type EmbeddingOptions struct {
	// Num is the number of rows (vocabulary size) and Dim the width of
	// each row; both required (> 0).
	Num, Dim int
	// DType of the table; zero means F32.
	DType tensor.DType
}

// Embedding is a lookup table, like PyTorch's nn.Embedding: Weight is
// [Num, Dim] and an index tensor of shape S gives rows of shape [S..., Dim].
// The gradient accumulates into the rows of repeated indices.
type Embedding struct {
	leaf
	Weight *autograd.Var
	opts   EmbeddingOptions
}

// NewEmbedding returns an Embedding with Weight drawn from N(0, 1), as
// PyTorch initialises it.
func NewEmbedding(rng *rand.Rand, o EmbeddingOptions) (*Embedding, error) {
	const name = "Embedding"
	dt, err := paramDType(name, o.DType)
	if err != nil {
		return nil, err
	}
	o.DType = dt
	switch {
	case o.Num <= 0 || o.Dim <= 0:
		return nil, optionsErr(name, "Num and Dim must be positive, got %d and %d", o.Num, o.Dim)
	case rng == nil:
		return nil, optionsErr(name, "nil *rand.Rand (pass tensor.NewRNG(seed))")
	}
	if err := checkSizes(name, dt, []int{o.Num, o.Dim}); err != nil {
		return nil, err
	}
	e := &Embedding{opts: o}
	w := tensor.Empty(dt, o.Num, o.Dim)
	Normal(rng, w, 0, 1)
	e.Weight = e.addParam("weight", w)
	return e, nil
}

// MustEmbedding is NewEmbedding that panics on invalid options.
func MustEmbedding(rng *rand.Rand, o EmbeddingOptions) *Embedding { return must(NewEmbedding(rng, o)) }

// Options returns the options the layer was built with (defaults filled).
func (e *Embedding) Options() EmbeddingOptions { return e.opts }

// Forward looks up the rows indexed by x.Value (I64 or I32, values in
// [0, Num)); x itself gets no gradient.
func (e *Embedding) Forward(x *autograd.Var) *autograd.Var {
	if !x.DType().IsInt() {
		panic(fmt.Sprintf("nn: Embedding(%d, %d) got %v indices (want I64 or I32)", e.opts.Num, e.opts.Dim, x.DType()))
	}
	return autograd.Embedding(e.Weight, x.Value)
}
