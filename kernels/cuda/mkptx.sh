#!/usr/bin/env bash
# Compiles every kernels/cuda/src/*.cu to kernels/cuda/ptx/*.ptx for
# compute_80 (PTX the driver JIT-compiles on Ampere and Hopper), with a
# first line recording the SHA-256 of src/common.cuh followed by the source
# (the header every kernel file includes) for TestPTXUpToDate.
# Needs nvcc and g++-11 (make cuda-deps).
set -euo pipefail
cd "$(dirname "$0")"
NVCC=${NVCC:-nvcc}
CCBIN=${CCBIN:-g++-11}
mkdir -p ptx
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for src in src/*.cu; do
	out=ptx/$(basename "${src%.cu}").ptx
	"$NVCC" -ccbin "$CCBIN" --ptx -arch=compute_80 -O3 -o "$tmp" "$src"
	{ echo "// esper-src-sha256: $(cat src/common.cuh "$src" | sha256sum | cut -c1-64)"; cat "$tmp"; } >"$out"
	echo "ptx: $src -> $out"
done
