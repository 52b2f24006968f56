// Package gpu is esper bench --device cuda: the GPU workloads of PERF.md
// (W1, W5, W6, W7, W8) on the CUDA backend, written as the CPU
// workloads' JSON reports (bench.Report) beside the PyTorch GPU peer
// (bench/pytorch/gpu_peers.py) of the same run when --compare pytorch is
// given. Device work is timed with CUDA events after warm-up and
// summarised by medians and percentiles (GPU.md); W1 is timed by wall
// clock, as on the CPU, because its epoch ends with a host read.
//
// Everything but this file needs the cuda build tag. The package is
// apart from bench because kernels/cuda's own tests import bench.
package gpu
