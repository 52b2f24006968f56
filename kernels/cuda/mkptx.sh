#!/usr/bin/env bash
# Compiles every kernels/cuda/src/*.cu to kernels/cuda/ptx/*.ptx for
# compute_80 (PTX the driver JIT-compiles on Ampere and Hopper), with a
# first line recording the SHA-256 of src/common.cuh followed by the source
# (the header every kernel file includes) for TestPTXUpToDate.
# Then assembles each PTX file, as it is, for the architectures in
# CUBIN_ARCHS (default sm_90: H100 and H200) with ptxas into
# cubin/<module>.<arch>.cubin.gz (gzip -n: the same bytes for the same
# PTX), and lists in cubin/SOURCES the SHA-256 of the PTX file each was
# assembled from: Open loads a device's own cubins, where they match the
# embedded PTX, instead of having the driver compile the PTX (13.7 s on a
# fresh H200); TestCubinsMatchPTX checks the list.
# Needs nvcc, ptxas and g++-11 (make cuda-deps).
set -euo pipefail
cd "$(dirname "$0")"
NVCC=${NVCC:-nvcc}
PTXAS=${PTXAS:-ptxas}
CUBIN_ARCHS=${CUBIN_ARCHS:-sm_90}
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
mkdir -p cubin
rm -f cubin/*.cubin.gz
sources=cubin/SOURCES
{
	echo "# arch module sha256-of-ptx/<module>.ptx (written by mkptx.sh; cubin/<module>.<arch>.cubin.gz)"
	for ptx in ptx/*.ptx; do
		mod=$(basename "${ptx%.ptx}")
		sum=$(sha256sum <"$ptx" | cut -c1-64)
		for arch in $CUBIN_ARCHS; do
			"$PTXAS" -arch="$arch" -O3 -o "$tmp" "$ptx"
			gzip -n -9 -c "$tmp" >"cubin/$mod.$arch.cubin.gz"
			echo "$arch $mod $sum"
			echo "cubin: $ptx -> cubin/$mod.$arch.cubin.gz" >&2
		done
	done
} >"$sources"
