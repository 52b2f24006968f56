// Package gpu is esper bench --device cuda: the GPU workloads of PERF.md
// (W1, W5, W6, W7, W8) on the CUDA backend, written as the CPU
// workloads' JSON reports (bench.Report) beside the PyTorch GPU peer
// (bench/pytorch/gpu_peers.py) of the same run when --compare pytorch is
// given; and W2 and W4, the CPU's workloads run on the device
// (bench.BenchW2, bench.BenchW4: timed, with their host syncs, without a
// GPU peer). Device work is timed with events after warm-up and summarised
// by medians and percentiles (GPU.md); W1 is timed by wall clock, as on
// the CPU, because its epoch ends with a host read.
//
// W1 runs five modes on the device: the bare engine loop eager and
// captured (bench.RunW1, the captured epoch fed through its graph's static
// inputs) and tolaria.Trainer eager, captured batch by batch and captured
// as one epoch graph (bench.RunW1Trainer, the data resident on the
// device), each one's final metrics checked against
// the same epochs on the CPU backend. PERF.md's targets judge the
// trainer-captured epoch: p95 ≤ 50 µs, ≥ 5× PyTorch eager, and ≥ 2×
// PyTorch's best mode, the lowest p95 among the peer's eager,
// reduce-overhead and cuda-graph modes that ran (named in the verdict);
// the bare captured figures are printed beside.
//
// W5 trains eagerly and, with --capture, as a captured graph, then
// evaluates the eagerly trained model eagerly and, with --capture, as a
// captured graph of the evaluation forward (autograd.Capture, replayed per
// batch after the staged batch is copied into its static input), every
// batch fed through the backend's kernels.Stager. Each evaluation mode
// reports its launches per batch; the captured evaluation's logits are
// checked against the eager forward's over the same batches (with the
// correct counts and loss sums from each), a difference failing the
// workload; and the evaluation verdict (≥ 1× PyTorch reduce-overhead)
// takes the faster esper mode, named.
//
// The package does not import kernels/cuda: it opens the device with
// kernels/device and uses the backend through kernels.Backend and the
// optional interfaces of kernels' stream.go (kernels.EventTimers,
// kernels.Stagers, kernels.ByteCopier, kernels.DeviceDescriber,
// kernels.GraphCloser) and kernels.ForeachStepper, which the CUDA backend
// implements. So it builds without the cuda tag too, where Run says how
// to get a CUDA build; the parts that need no stream interface (W1's
// modes, W5's evaluation check) are tested on the sim device. It is apart
// from bench because kernels/cuda's own tests import bench.
package gpu
