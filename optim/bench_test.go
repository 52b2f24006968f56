package optim_test

import (
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// W7 (PERF.md): an optimizer step over 200 parameter tensors totalling
// 10M fp32 parameters. The sizes vary (a mix of weight matrices and
// biases) but always sum to exactly w7Total.
const (
	w7Tensors = 200
	w7Total   = 10_000_000
)

func w7Params(b *testing.B) []*autograd.Var {
	b.Helper()
	rng := tensor.NewRNG(7)
	// Alternate large and small tensors: 100 "weights" and 100 "biases".
	sizes := make([]int, w7Tensors)
	rest := w7Total
	for i := range sizes {
		if i%2 == 1 {
			sizes[i] = 512 + 64*(i%7)
			rest -= sizes[i]
		}
	}
	for i := 0; i < w7Tensors; i += 2 {
		sizes[i] = rest / (w7Tensors / 2)
	}
	sizes[0] += rest - (rest/(w7Tensors/2))*(w7Tensors/2)
	ps := make([]*autograd.Var, w7Tensors)
	for i, n := range sizes {
		ps[i] = autograd.Param(tensor.Uniform(rng, tensor.F32, -0.1, 0.1, n))
	}
	return ps
}

// fillW7Grads writes small random gradients into the arena.
func fillW7Grads(a *optim.Arena) {
	g := a.FlatGrad().F32()
	s := uint32(12345)
	for i := range g {
		s = s*1664525 + 1013904223
		g[i] = float32(int32(s>>8)-1<<23) * (1e-3 / (1 << 23))
	}
}

func benchStep(b *testing.B, opt optim.Optimizer, bytesPerParam int64) {
	a := opt.Arena()
	if a.Len() != w7Total {
		b.Fatalf("arena holds %d parameters, want %d", a.Len(), w7Total)
	}
	fillW7Grads(a)
	defer func() {
		if r := recover(); r != nil {
			b.Skipf("kernel not available: %v", r)
		}
	}()
	opt.Step() // warm-up: state buffers, worker pool
	b.SetBytes(bytesPerParam * int64(a.Len()))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		opt.Step()
	}
}

// BenchmarkSGDStep: SGD with momentum and weight decay reads param, grad
// and momentum and writes param and momentum: 5 × 4 bytes per parameter.
func BenchmarkSGDStep(b *testing.B) {
	opt, err := optim.NewSGD(w7Params(b), optim.SGDOptions{LR: 0.01, Momentum: 0.9, WeightDecay: 1e-4})
	if err != nil {
		b.Fatal(err)
	}
	benchStep(b, opt, 5*4)
}

// BenchmarkAdamWStep: AdamW reads param, grad, m and v and writes param,
// m and v: 7 × 4 bytes per parameter.
func BenchmarkAdamWStep(b *testing.B) {
	opt, err := optim.NewAdamW(w7Params(b), optim.AdamWOptions{})
	if err != nil {
		b.Fatal(err)
	}
	benchStep(b, opt, 7*4)
}

// BenchmarkFlatCopy is the bandwidth reference W7 compares against: a
// backend copy of the 10M-element flat buffer (read + write, 8 bytes per
// element).
func BenchmarkFlatCopy(b *testing.B) {
	src := tensor.Zeros(tensor.F32, w7Total)
	dst := tensor.Zeros(tensor.F32, w7Total)
	be := kernels.For(tensor.CPU)
	be.Copy(dst, src)
	b.SetBytes(8 * w7Total)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		be.Copy(dst, src)
	}
}
