// Package optim holds Esper-Go's optimizers and their companions: the flat
// parameter Arena, SGD (momentum, dampening, Nesterov, weight decay,
// maximize), fused AdamW, the fp16 GradScaler, global-norm gradient
// clipping and learning-rate schedules.
//
// Every optimizer works over an Arena: the parameters of one dtype live in
// one flat buffer and their gradients in another, and each parameter's
// Value and Grad are views into them. A step is then one kernel launch per
// dtype (one in practice) instead of one per parameter, the way llm.c's
// fused AdamW and PyTorch's foreach/fused optimizers work.
//
// All scalars a step depends on at run time — the learning rate, the step
// counter, the loss scale, the growth tracker and the found-inf flag — live
// in tensors on the parameters' device, and no method on the step path
// reads one back to the host. A step can therefore be captured
// (autograd.Capture, kernels.Backend.BeginCapture) and replayed: SetLR
// writes the learning-rate tensor in place outside the capture, and the
// next replay sees the new value. Host reads exist only in accessors meant
// for tests, logging and checkpoints (StepCount, GradScaler.CurrentScale,
// StateDict).
package optim
