package sim_test

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/kernels/sim"
	"github.com/esper-go/esper/tensor"
)

// ExampleBackend_SetLaunchBound: sim answers LaunchBound as the CPU does
// unless told to answer as a GPU does; code above the kernels then takes
// a GPU's paths on it, and a captured join is one launch, so that its
// counts (Calls, a captured graph's Len) stand for a GPU's.
// (ESPER_SIM_LAUNCH_BOUND=on sets it when the device package opens sim.)
func ExampleBackend_SetLaunchBound() {
	b := sim.Default()
	var lb kernels.LaunchBounder = b
	fmt.Println("default:", lb.LaunchBound())
	b.SetLaunchBound(true)
	fmt.Println("set:", lb.LaunchBound())
	b.SetLaunchBound(false)

	// Calls counts the ops asked of sim, as a device would be asked.
	x, _ := tensor.Zeros(tensor.F32, 4).ToDevice(tensor.Sim(0))
	before := b.Calls()
	b.Fill(x, 1)
	b.BinaryScalar(kernels.Mul, x, x, 2, false)
	fmt.Println("ops:", b.Calls()-before)
	// Output:
	// default: false
	// set: true
	// ops: 2
}
