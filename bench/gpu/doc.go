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
// The package does not import kernels/cuda: it opens the device with
// kernels/device and uses the backend through kernels.Backend and the
// optional interfaces of kernels' stream.go (kernels.EventTimers,
// kernels.Stagers, kernels.ByteCopier, kernels.DeviceDescriber,
// kernels.GraphCloser) and kernels.ForeachStepper, which the CUDA backend
// implements. So it builds without the cuda tag too, where Run says how
// to get a CUDA build. It is apart from bench because kernels/cuda's own
// tests import bench.
package gpu
