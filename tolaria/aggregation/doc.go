// Package aggregation combines the gradients of one optimizer step in
// Tolaria's trainer: it flattens parameter gradients into pooled flat
// buffers, splits the flat gradient into one vector per seed (the host's
// share, the "teacher", redistributed by attribution), combines those
// vectors with PCGrad conflict projection and stage weights, and keeps
// the per-seed telemetry of the epoch (esper-reference §3.1.1 steps 3–5,
// §3.1.2 and §3.1.4, the first-generation tolaria/aggregation.py).
//
// One optimizer step reads:
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
// Everything works on host memory (float32 slices); the per-step paths
// (GradsToFlat, FlatToGrads, PerSeed, Combiner, Record) allocate nothing
// once their buffers have grown to the model's size. Inner products are
// accumulated in float64. Nothing here is safe for concurrent use except
// GradientBufferPool.
package aggregation
