// Package bench holds the performance workloads of PERF.md (W1 to W7 on
// the CPU; the GPU workloads come with the CUDA backend),
// the harness that times them and compares
// them with their PyTorch peers in the same run, and the JSON baselines
// committed under bench/baselines/.
//
// Workloads are plain functions returning a Result, so they run the same
// way from `esper bench` and from `go test -bench ./bench`.
package bench
