package cpu

import (
	"fmt"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Benchmarks of the small shapes W1 and W4 run (for benchstat): the tiny
// products and cross-entropy rows of W1's 16→4 classifier at batch 4, and
// the layers of W4's base-8 CNN host at batch 128 (3×3 convolutions, a
// seed's 1×1, batch norm with ReLU, the 2×2 max pool).

// BenchmarkTinyMatMul times W1's linear layer: the forward x·Wᵀ + b
// (4×16 by 4×16, the 4×4 dot blocks) and the weight gradient dyᵀ·x
// (sgemmTiny).
func BenchmarkTinyMatMul(b *testing.B) {
	x, w, bias := randT(1, tensor.F32, 4, 16), randT(2, tensor.F32, 4, 16), randT(3, tensor.F32, 4)
	dy := randT(4, tensor.F32, 4, 4)
	y, dw := tensor.Empty(tensor.F32, 4, 4), tensor.Empty(tensor.F32, 4, 16)
	b.Run("forward", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			be.MatMulBias(y, x, w, bias, false, true)
		}
	})
	b.Run("weight_grad", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			be.MatMul(dw, dy, x, true, false)
		}
	})
}

// BenchmarkFewRowsMatMul times x·Wᵀ for a few rows against a 256×256
// weight (W2's policy layers at batch 1: one to three graph nodes per
// type), the products that skip packing and run the direct path.
func BenchmarkFewRowsMatMul(b *testing.B) {
	w := randT(2, tensor.F32, 256, 256)
	for _, m := range []int{1, 2, 3, 4, 8} {
		x := randT(1, tensor.F32, m, 256)
		y := tensor.Empty(tensor.F32, m, 256)
		b.Run(fmt.Sprintf("rows=%d", m), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				be.MatMul(y, x, w, false, true)
			}
		})
	}
}

// BenchmarkCrossEntropySmall times W1's loss over 4 rows of 4 classes,
// forward (mean) and backward.
func BenchmarkCrossEntropySmall(b *testing.B) {
	logits := randT(1, tensor.F32, 4, 4)
	target := tensor.FromSlice([]int64{1, 3, 0, 2}, 4)
	loss, dloss := tensor.Empty(tensor.F32), tensor.Full(tensor.F32, 1)
	dl := tensor.Empty(tensor.F32, 4, 4)
	p := kernels.CrossEntropyParams{}
	b.Run("forward", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			be.CrossEntropy(loss, logits, target, p)
		}
	})
	b.Run("backward", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			be.CrossEntropyBackward(dl, logits, target, dloss, p)
		}
	})
}

// BenchmarkConvW4 times W4's host layers and a seed's 1×1 convolution,
// each pass with the direct kernels (direct) and through im2col and the
// packed GEMM (im2col).
func BenchmarkConvW4(b *testing.B) {
	defer func(v bool) { convDirect = v }(convDirect)
	for _, l := range []struct {
		name                  string
		cin, cout, hw, kernel int
	}{{"l1_1to8_28", 1, 8, 28, 3}, {"l2_8to16_14", 8, 16, 14, 3}, {"l3_16to32_7", 16, 32, 7, 3}, {"seed_1x1_8to8_28", 8, 8, 28, 1}} {
		pad := l.kernel / 2
		p := kernels.Conv2dParams{PadH: pad, PadW: pad}
		x := randT(1, tensor.F32, 128, l.cin, l.hw, l.hw)
		w := randT(2, tensor.F32, l.cout, l.cin, l.kernel, l.kernel)
		y := tensor.Empty(tensor.F32, 128, l.cout, l.hw, l.hw)
		dx := tensor.Empty(tensor.F32, 128, l.cin, l.hw, l.hw)
		dw := tensor.Empty(tensor.F32, l.cout, l.cin, l.kernel, l.kernel)
		flops := 2.0 * 128 * float64(l.cout*l.hw*l.hw*l.cin*l.kernel*l.kernel)
		for _, direct := range []bool{true, false} {
			route := "im2col"
			if direct {
				route = "direct"
			}
			run := func(pass string, f func()) {
				b.Run(l.name+"/"+route+"/"+pass, func(b *testing.B) {
					convDirect = direct
					for i := 0; i < b.N; i++ {
						f()
					}
					b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
			run("forward", func() { be.Conv2d(y, x, w, nil, p) })
			if l.cin > 1 {
				run("backward_input", func() { be.Conv2dBackwardInput(dx, y, w, p) })
			}
			run("backward_weight", func() { be.Conv2dBackwardWeight(dw, x, y, p) })
		}
	}
}

// BenchmarkNormPoolW4 times the batch norm with ReLU and the 2×2 max pool
// over W4's first activation (128×8×28×28, 3.2 MB), forward and backward.
func BenchmarkNormPoolW4(b *testing.B) {
	x := randT(1, tensor.F32, 128, 8, 28, 28)
	g := randT(2, tensor.F32, 128, 8, 28, 28)
	w, bias := randT(3, tensor.F32, 8), randT(4, tensor.F32, 8)
	y, dx := tensor.Empty(tensor.F32, 128, 8, 28, 28), tensor.Empty(tensor.F32, 128, 8, 28, 28)
	mean, rstd := tensor.Empty(tensor.F32, 8), tensor.Empty(tensor.F32, 8)
	dw, db := tensor.Empty(tensor.F32, 8), tensor.Empty(tensor.F32, 8)
	pooled, idx := tensor.Empty(tensor.F32, 128, 8, 14, 14), tensor.Empty(tensor.I32, 128, 8, 14, 14)
	gp := randT(5, tensor.F32, 128, 8, 14, 14)
	pp := kernels.Pool2dParams{KernelH: 2, KernelW: 2}
	mb := float64(x.Numel()*4) / 1e6
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"batchnorm_relu/forward", func() { be.BatchNormRelu(y, mean, rstd, x, w, bias, nil, nil, true, 0.1, 1e-5) }},
		{"batchnorm_relu/backward", func() { be.BatchNormReluBackward(dx, dw, db, g, x, bias, mean, rstd, w, true) }},
		{"maxpool/forward", func() { be.MaxPool2d(pooled, idx, y, pp) }},
		{"maxpool/backward", func() { be.MaxPool2dBackward(dx, gp, idx, pp) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			c.f()
			for i := 0; i < b.N; i++ {
				c.f()
			}
			b.ReportMetric(mb*float64(b.N)/b.Elapsed().Seconds()/1e3, "GB/s-of-x")
		})
	}
}
