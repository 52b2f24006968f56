package blueprint_test

import (
	"errors"
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kasmina/blueprint"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// Build returns a seed on the CPU; nn.To moves it to its host's device
// (here the examples' device: the CPU unless ESPER_TEST_DEVICE names
// another).
func ExampleBuild() {
	seed, err := blueprint.Build(blueprint.TopologyCNN, "conv_light", blueprint.Options{
		Channels: 32,
		RNG:      tensor.NewRNG(1),
	})
	if err != nil {
		panic(err)
	}
	dev := testdevice.Must()
	if err := nn.To(seed, dev); err != nil {
		panic(err)
	}
	x, err := tensor.Normal(tensor.NewRNG(2), tensor.F32, 0, 1, 8, 32, 16, 16).ToDevice(dev)
	if err != nil {
		panic(err)
	}
	y := seed.Forward(autograd.Const(x))
	fmt.Println(y.Shape(), blueprint.ParamCount(seed))
	for _, p := range seed.NamedParameters() {
		fmt.Println(p.Name, p.Var.Shape())
	}
	// Output:
	// [8 32 16 16] 9312
	// out_scale [1 32 1 1]
	// conv.weight [32 32 3 3]
	// gn.weight [32]
	// gn.bias [32]
}

func ExampleList() {
	specs, err := blueprint.List(blueprint.TopologyMLP)
	if err != nil {
		panic(err)
	}
	for _, s := range specs {
		fmt.Println(s.Name, s.ParamEstimate)
	}
	// Output:
	// noop 0
	// norm 800
	// lora 6000
	// lora_large 25000
	// mlp_small 591000
	// mlp 1200000
}

func ExampleLookup() {
	_, err := blueprint.Lookup(blueprint.TopologyMLP, "conv_light")
	fmt.Println(errors.Is(err, blueprint.ErrUnknown))
	fmt.Println(err)
	// Output:
	// true
	// blueprint: unknown blueprint "conv_light" for topology "mlp" (available: noop, norm, lora, lora_large, mlp_small, mlp)
}

// A MULTIPLY seed starts with its final affine layer at zero, so it
// starts as the identity.
func ExampleOptions_zeroFinal() {
	seed := blueprint.MustBuild(blueprint.TopologyCNN, "conv_heavy", blueprint.Options{
		Channels:  16,
		RNG:       tensor.NewRNG(1),
		ZeroFinal: true,
	})
	dev := testdevice.Must()
	if err := nn.To(seed, dev); err != nil {
		panic(err)
	}
	x := tensor.Normal(tensor.NewRNG(2), tensor.F32, 0, 1, 2, 16, 8, 8)
	xd, err := x.ToDevice(dev)
	if err != nil {
		panic(err)
	}
	y, err := seed.Forward(autograd.Const(xd)).Value.ToDevice(tensor.CPU) // one explicit copy back
	if err != nil {
		panic(err)
	}
	same := true
	for i, v := range y.F32() {
		same = same && v == x.F32()[i]
	}
	fmt.Println(same)
	// Output: true
}
