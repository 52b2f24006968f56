package nn

import (
	"strconv"

	"github.com/esper-go/esper/autograd"
)

// Sequential applies its children in order, each to the previous one's
// output. The children are named "0", "1", ... as in PyTorch's
// nn.Sequential, so a Linear in position 2 owns "2.weight" and "2.bias".
type Sequential struct {
	Composite
}

// NewSequential returns a Sequential of mods, which must not be nil.
func NewSequential(mods ...Module) *Sequential {
	s := &Sequential{}
	for _, m := range mods {
		s.Append(m)
	}
	return s
}

// Append adds m at the end under the next index name.
func (s *Sequential) Append(m Module) {
	s.Register(strconv.Itoa(len(s.children)), m)
}

// Len returns the number of children.
func (s *Sequential) Len() int { return len(s.children) }

// At returns child i.
func (s *Sequential) At(i int) Module { return s.children[i].Module }

// Forward applies every child in order.
func (s *Sequential) Forward(x *autograd.Var) *autograd.Var {
	for _, ch := range s.children {
		x = ch.Module.Forward(x)
	}
	return x
}
