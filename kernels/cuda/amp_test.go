//go:build cuda

package cuda

import (
	"math"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// TestCNNHostAutocastTrainsAsOnCPU: steps of the kasmina CNN host under
// autocast, in fp16 with the device-side GradScaler (Scale, Backward,
// Step, which unscales and checks the gradients, Update) and in bf16
// without one, run on the device: every op of the step takes the dtypes
// autocast hands it (half convolutions and linear layers with their
// backward passes, F32 norms, losses and master weights and gradients),
// the losses follow the CPU backend's step by step within the half
// type's rounding, the fixed batch's loss falls, and no step is skipped
// (the scale ends where the CPU's does).
func TestCNNHostAutocastTrainsAsOnCPU(t *testing.T) {
	const steps, batch = 8, 16
	rng := tensor.NewRNG(21)
	x := tensor.Normal(rng, tensor.F32, 0, 1, batch, 1, 28, 28)
	y := tensor.RandInt(rng, 10, batch)
	for _, c := range []struct {
		dt    tensor.DType
		scale bool
		tol   float64
	}{{tensor.F16, true, 3e-2}, {tensor.BF16, false, 5e-2}} {
		t.Run(c.dt.String(), func(t *testing.T) {
			run := func(dev tensor.Device) (losses []float64, scale float64) {
				h, err := kasmina.NewCNNHost(kasmina.CNNHostOptions{InChannels: 1, BaseChannels: 4, RNG: tensor.NewRNG(5)})
				if err != nil {
					t.Fatal(err)
				}
				if err := nn.To(h, dev); err != nil {
					t.Fatal(err)
				}
				opt, err := optim.NewSGD(h.Parameters(), optim.SGDOptions{LR: 0.05, Momentum: 0.9})
				if err != nil {
					t.Fatal(err)
				}
				var sc *optim.GradScaler
				if c.scale {
					if sc, err = optim.NewGradScaler(optim.GradScalerOptions{InitScale: 1024, Device: dev}); err != nil {
						t.Fatal(err)
					}
				}
				xd, err := x.ToDevice(dev)
				if err != nil {
					t.Fatal(err)
				}
				yd, err := y.ToDevice(dev)
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < steps; i++ {
					opt.ZeroGrad()
					var loss *autograd.Var
					autograd.Autocast(c.dt, func() {
						loss = autograd.CrossEntropy(h.Forward(autograd.Const(xd)), yd, kernels.CrossEntropyParams{})
					})
					if sc == nil {
						autograd.Backward(loss)
						opt.Step()
					} else {
						autograd.Backward(sc.Scale(loss))
						sc.Step(opt)
						sc.Update()
					}
					losses = append(losses, fromDev(t, loss.Value).Float64s()[0])
				}
				if sc != nil {
					scale = fromDev(t, sc.ScaleTensor()).Float64s()[0]
				}
				return losses, scale
			}
			cpuLosses, cpuScale := run(tensor.CPU)
			devLosses, devScale := run(tensor.CUDA(0))
			for i := range devLosses {
				if d := math.Abs(devLosses[i] - cpuLosses[i]); !(d <= c.tol*math.Abs(cpuLosses[i])) {
					t.Errorf("step %d: loss %v on the device, %v on the CPU (relative difference %.3g > %.3g)", i, devLosses[i], cpuLosses[i], d/math.Abs(cpuLosses[i]), c.tol)
				}
			}
			if !(devLosses[steps-1] < devLosses[0]) {
				t.Errorf("the fixed batch's loss went %v → %v over %d steps on the device: not training", devLosses[0], devLosses[steps-1], steps)
			}
			if devScale != cpuScale {
				t.Errorf("loss scale %v on the device, %v on the CPU (a step was skipped on one of them)", devScale, cpuScale)
			}
			t.Logf("%v losses: device %.5g, CPU %.5g; loss scale %v", c.dt, devLosses, cpuLosses, devScale)
		})
	}
}
