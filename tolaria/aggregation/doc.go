// Package aggregation combines the gradients of one optimizer step in
// Tolaria's trainer: it flattens parameter gradients into pooled flat
// buffers, splits the flat gradient into one vector per seed (the host's
// share, the "teacher", redistributed by attribution), combines those
// vectors with PCGrad conflict projection and stage weights, and keeps
// the per-seed telemetry of the epoch (esper-reference §3.1.1 steps 3–5,
// §3.1.2 and §3.1.4, the first-generation tolaria/aggregation.py).
//
// One optimizer step on the host reads:
//
//	buf, _ := pool.Acquire(n, tensor.F32)           // GradientBufferPool
//	GradsToFlat(params, buf.F32())                   // parameter order
//	PerSeed(&split, [][]float32{buf.F32()}, masks, attribSums, attribUses, seeds)
//	acc.Record(split.Names, split.Flats, split.Weights, alphas, attribSums, attribUses)
//	acc.RecordTeacherNorm(split.TeacherNorm)            // when split.Redistributed
//	out, conflicts, _ := comb.Combine(split.Flats, pcgrad, split.Weights, rng)
//	acc.RecordCombine(1, conflicts)
//	FlatToGrads(out, params)
//	pool.Release(buf)
//
// and at the end of the epoch acc.Finalize returns the tolaria.grad_agg.*
// metrics and the warning events for the trainer to emit.
//
// That host path works on float32 slices; its per-step calls
// (GradsToFlat, FlatToGrads, PerSeed, Combiner, Record) allocate nothing
// once their buffers have grown to the model's size, and accumulate
// inner products in float64.
//
// The tensor path does the same step on the gradients' device, through
// the backend's ops (kernels.Backend: Copy, Fill, Binary, Where, Reduce,
// ForeachNorm, ForeachAxpy), and reads nothing on the host:
//
//	buf, _ := pool.AcquireOn(dev, n, tensor.F32)       // a device buffer
//	GradsToFlatTensor(params, buf)                      // backend copies
//	PerSeedTensors(&split, []*tensor.Tensor{buf}, masks, attribSums, attribUses, seeds)
//	acc.RecordTensors(split.Names, split.Flats, split.Weights, alphas, attribSums, attribUses)
//	acc.RecordTeacherNormTensor(split.TeacherNorm)      // when split.Redistributed
//	conflicts, _ := comb.CombineInto(buf, split.Flats, pcgrad, split.Weights, rng) // TensorCombiner
//	acc.RecordCombineTensor(1, conflicts)
//	FlatTensorToGrads(buf, params)
//	pool.Release(buf)
//
// PCGrad's inner products, conflict tests and projection coefficients
// stay in one-element device tensors (the conflict test and the guard
// mask the coefficient to zero with Where, so no host branch is needed),
// and the accumulator sums the step's figures on the device: a step
// costs no host sync, and the epoch's figures come over in one copy at
// SeedMetricsAccumulator.Flush (called by Finalize). The tensor path also
// runs on the CPU; its results agree with the host path's within float32
// rounding (see TensorCombiner) and are bitwise the same on every device
// whose kernels compute like the CPU's (the sim device does).
//
// Nothing here is safe for concurrent use except GradientBufferPool.
package aggregation
