// Package cuda is the CUDA backend of the Esper engine (build tag cuda):
// hand-written kernels in src/*.cu, compiled to PTX for compute_80 by
// `make ptx` and embedded (ptx/*.ptx, loaded and JIT-compiled by the
// driver for the device at Open; on sm_90, the H100 and H200, the
// embedded cubins that `make ptx` assembles from the same PTX load
// instead, with no compile: cubin.go), cuBLAS reached through dlopen, a
// stream-ordered caching allocator, and CUDA graph capture and replay.
//
// Float kernels come in F32, BF16 and F16 (the half types computed in
// fp32 and rounded to nearest even on store; matmuls and convolutions
// through cuBLAS with fp32 accumulation), so both bf16 and fp16 autocast
// run here. What stays F32 alone: the optimizers, the foreach operations
// and UnscaleCheck (autocast keeps parameters, gradients and optimizer
// state in F32), and the fused GradAccumulator and ChannelAxpyer (their
// interfaces take F32 and F64). The device has no F64 kernels.
//
// gorgonia.org/cu provides the driver API (devices, contexts, memory,
// streams, modules); driver.go binds the few calls it lacks (kernel
// launch without per-launch allocation, stream capture, graphs, pinned
// host memory) and cublas.go the cuBLAS calls. A binary built with
// -tags cuda must only be run on a machine with a GPU: gorgonia.org/cu
// exits from its package init when cuInit fails. CI only compiles it
// (`make cuda-check`); GPU.md says how the GPU runs are made.
//
// Backend (backend.go) implements kernels.Backend over one Device:
// NewBackend opens the device and Register makes it the backend of
// tensors on tensor.KindCUDA, so that autograd, nn and optim run on it.
// Each op family of kernels has its file under the same name, holding
// the Backend methods, the Device methods they call and, in src/, the
// kernels: elementwise, reduce, matmul, conv, pool, softmax, norm, index,
// segment, graph (kernels.GraphAggregator, F32; the backward that trains
// it fused, kernels.GATMeanGradder and kernels.GatherMeanGradder, in
// graph_grad), shape, random, optim
// and capture (shape and capture have no kernels of their own: Concat
// is one copy_blocks launch of src/elementwise.cu where its operands
// allow (laid out by copy_blocks.go) and strided copies otherwise, Pad a
// fill and a strided copy, capture is the driver's). The runtime around
// them: device.go (context, stream, modules, launches), operands.go
// (operand checks), strided.go (strided launch geometry), alloc.go,
// driver.go and cublas.go.
//
// Convolutions run as im2col and cuBLAS. Direct kernels for small fp32
// layers exist (conv_direct.go) but are off by default: on an H200 they
// were the slower path for W4 (116 against 188 env-epochs/s).
// ESPER_CUDA_CONV=direct, read by Open, turns them on, for comparing the
// two paths in one run (gpu/run.sh times W4 both ways).
//
// Lists of tensors (the foreach operations, ForeachSGDStep and
// ForeachAdamWStep) are updated with one multi-tensor launch each
// (multi_tensor.go); Stager and CopyHostToDevice move host batches (the
// Stager through pinned buffers on a copy stream of its own, ordered with
// the device's stream by events: Release, StageAhead and Await let a
// batch's copy hide behind the step before, and its trace measures how
// much does), CopyDeviceToDevice device buffers, and Timer times device
// work with CUDA events (what `esper bench --device cuda` measures with).
//
// Without the cuda tag the package holds only this documentation, the
// layout of the multi-tensor tables (mt_table.go, tested there without a
// GPU) and of a copy_blocks launch (copy_blocks.go, likewise), the
// arithmetic of a Stager trace (overlap.go, likewise) and the
// check that every PTX file was generated from the current source.
package cuda
