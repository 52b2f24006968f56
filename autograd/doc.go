// Package autograd is Esper-Go's define-by-run differentiation engine.
//
// A Var holds a tensor value and, for variables that require gradients,
// a gradient. Every differentiable op (Add, MatMul, Conv2d, CrossEntropy,
// ...) computes its result through the backend of its inputs' device and,
// when grad mode is on and any input requires a gradient, records a node
// that knows how to push the output gradient back to its inputs.
// Backward walks those nodes once in reverse topological order and
// accumulates gradients into the leaves' Grad tensors (in place, so an
// optimizer's arena-backed gradients stay put), then fires each leaf's
// post-accumulate hooks.
//
// NoGrad and InferenceMode run a function without recording anything:
// no nodes, no saved tensors. Autocast runs a function with matmul,
// linear and convolution in BF16 or F16 (fp32 accumulation) and keeps
// softmax, log-softmax, norms, reductions and losses in F32, like
// PyTorch's autocast op lists.
//
// Capture records a whole training step (forward, backward, optimizer)
// as a flat launch list over static buffers and replays it; see
// capture.go.
//
// The modes (grad, inference, autocast) are process-wide: they are meant
// to be set by the goroutine that drives training, not toggled from
// several goroutines at once.
package autograd
