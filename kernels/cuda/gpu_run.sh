#!/usr/bin/env bash
# gpu/run.sh OUTDIR — the GPU run of a bundle made by `make gpu-bundle`
# (GPU.md): correctness first (the cuda-tagged tests: CPU-vs-CUDA parity,
# then compute-sanitizer memcheck on them), then the benchmarks: the
# PyTorch peers, then esper's side of the same workloads (W1, W5, W6, W7, W8)
# with the peers' figures of this run beside it. Results and logs go to
# OUTDIR (esper's JSON reports under OUTDIR/esper); the exit status is
# non-zero when a test, a peer or an esper workload failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: gpu/run.sh OUTDIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)

# Find libcuda and cuBLAS where GPU images keep them.
for d in /usr/local/nvidia/lib64 /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do
	[ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
if [ -z "${ESPER_CUBLAS_LIB:-}" ]; then
	for f in /usr/local/cuda/lib64/libcublas.so.1[123] \
		$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__))' 2>/dev/null)/cublas/lib/libcublas.so.1[123]; do
		if [ -e "$f" ]; then export ESPER_CUBLAS_LIB=$f; break; fi
	done
fi
{
	echo "date: $(date -u +%FT%TZ)"
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
	echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
	echo "ESPER_CUBLAS_LIB=${ESPER_CUBLAS_LIB:-}"
} | tee "$out/machine.txt"

status=0
export ESPER_GPU_BUNDLE=1 # TestPTXUpToDate skips away from the sources
echo "== kernels/cuda tests"
(cd "$here" && ./kernels_cuda.test -test.v -test.count=1) 2>&1 | tee "$out/kernels_cuda.log" || status=1
if command -v compute-sanitizer >/dev/null 2>&1; then
	echo "== compute-sanitizer memcheck on the kernel tests"
	(cd "$here" && compute-sanitizer --tool memcheck --error-exitcode 3 ./kernels_cuda.test -test.count=1) \
		>"$out/memcheck.log" 2>&1 || status=1
	tail -3 "$out/memcheck.log"
else
	echo "compute-sanitizer not found: memcheck skipped" | tee "$out/memcheck.log"
fi
echo "== kernels/cuda benchmarks (H2D pinned vs pageable)"
(cd "$here" && ./kernels_cuda.test -test.run '^$' -test.bench . -test.benchtime 200x) 2>&1 | tee "$out/kernels_cuda_bench.log" || status=1

# The PyTorch GPU peers (same run, so that ratios compare like with like).
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	for w in w1 w5 w6 w7 w8; do
		echo "== PyTorch peer $w"
		python3 "$here/pytorch/gpu_peers.py" "$w" --json "$out/pytorch_$w.json" >"$out/pytorch_$w.log" 2>&1 || status=1
		tail -5 "$out/pytorch_$w.log"
	done
else
	echo "no CUDA-enabled PyTorch: the GPU peers were skipped" | tee "$out/pytorch.log"
fi

# esper's side: each workload's JSON report carries the peer's figures of
# this run (read from OUTDIR/pytorch_<w>.json when the peer wrote one) and
# the ratios PERF.md's targets are stated in.
mkdir -p "$out/esper"
for w in w1 w5 w6 w7 w8; do
	echo "== esper bench --device cuda --workload $w"
	peer=(--peer-dir "$here/pytorch")
	[ -s "$out/pytorch_$w.json" ] && peer+=(--peer-results "$out")
	"$here/esper" bench --device cuda --workload "$w" --json "$out/esper" "${peer[@]}" \
		>"$out/esper_$w.log" 2>&1 || status=1
	tail -12 "$out/esper_$w.log"
done
exit $status
