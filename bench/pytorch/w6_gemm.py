#!/usr/bin/python3
"""PERF.md W6 "gemm" workload (CPU part), PyTorch peer.

fp32 GEMM C = A @ B of two contiguous n x n matrices (default n = 1024,
entries uniform in [-1, 1)), computed with torch.mm(a, b, out=c) (OpenBLAS
under Debian's PyTorch 1.13).  --warmup products are run first and not
measured; each of the --reps measured products is timed with
time.perf_counter_ns.  GFLOP/s counts 2*n^3 floating-point operations per
product and is reported for the best and the median time.

    OMP_NUM_THREADS=2 /usr/bin/python3 bench/pytorch/w6_gemm.py \
        --size 1024 --reps 20 --warmup 3 --threads 2 --json /tmp/w6_pytorch.json

With --serve the script stays up and runs blocks of products on request,
so that `esper bench` can alternate short blocks of its own products with
the peer's without paying Python's start-up between them: it prints one
JSON line {"ready": true, ...} once the operands exist, then reads lines
"WARMUP REPS" from stdin, and for each runs WARMUP unmeasured and REPS
measured products and prints the block's result (the object --json would
hold for those products) as one JSON line.  It exits at the end of stdin.
Its human-readable lines go to stderr in this mode.
"""

import argparse
import json
import os
import platform
import re
import sys
import time

from peer_common import percentile, write_json  # noqa: E402


def parse_args(argv):
    ap = argparse.ArgumentParser(description="W6 gemm, PyTorch peer")
    ap.add_argument("--size", type=int, default=1024, help="n of the n x n x n product (default 1024)")
    ap.add_argument("--reps", type=int, default=20, help="measured products (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="unmeasured products (default 3)")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="seed for the operands (default 0)")
    ap.add_argument("--json", metavar="PATH", help="write the result as JSON to PATH")
    ap.add_argument("--serve", action="store_true",
                    help="run blocks of products on request from stdin (see the module docstring)")
    args = ap.parse_args(argv)
    if args.size <= 0 or args.reps <= 0 or args.warmup < 0 or args.threads <= 0:
        ap.error("--size, --reps and --threads must be > 0 and --warmup >= 0")
    return args


def blas_info(torch):
    """BLAS_INFO of the torch build ("generic" for Debian's, which calls
    libblas.so.3, the OpenBLAS of libopenblas0-pthread through
    update-alternatives)."""
    m = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    return m.group(1) if m else "unknown"


def run_block(torch, a, b, c, warmup, reps):
    """Runs warmup unmeasured products, then reps timed ones; returns their
    latencies in ns."""
    for _ in range(warmup):
        torch.mm(a, b, out=c)
    clock = time.perf_counter_ns
    lat_ns = []
    for _ in range(reps):
        t0 = clock()
        torch.mm(a, b, out=c)
        lat_ns.append(clock() - t0)
    return lat_ns


def block_result(torch, args, a, b, c, lat_ns, warmup):
    """The result object of one block of products, c holding the last one."""
    n = args.size
    # A sampled check that the product is right (float64 reference).
    g = torch.Generator().manual_seed(args.seed + 1)
    rows = torch.randint(0, n, (16,), generator=g)
    cols = torch.randint(0, n, (16,), generator=g)
    ref = (a[rows].double() * b[:, cols].double().t()).sum(dim=1)
    mag = (a[rows].double() * b[:, cols].double().t()).abs().sum(dim=1).clamp_min(1e-30)
    max_rel_err = ((c[rows, cols].double() - ref).abs() / mag).max().item()

    us = sorted(v / 1000.0 for v in lat_ns)
    flop = 2.0 * n * n * n
    return {
        "workload": "W6",
        "peer": "pytorch",
        "torch_version": torch.__version__,
        "blas_info": blas_info(torch),
        "threads": torch.get_num_threads(),
        "size": n,
        "reps": len(lat_ns),
        "warmup": warmup,
        "flop_per_gemm": flop,
        "p50_us": round(percentile(us, 50), 3),
        "p95_us": round(percentile(us, 95), 3),
        "min_us": round(us[0], 3),
        "max_us": round(us[-1], 3),
        "best_gflops": round(flop / (us[0] * 1e-6) / 1e9, 3),
        "median_gflops": round(flop / (percentile(us, 50) * 1e-6) / 1e9, 3),
        "lat_us": [round(v / 1000.0, 3) for v in lat_ns],
        "max_rel_err": max_rel_err,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def summary_line(result):
    return ("W6 pytorch %s (%d threads): %d^3 fp32 torch.mm, %d reps after %d warm-up: "
            "best %.1f GFLOP/s  median %.1f GFLOP/s  (p50 %.1f us)" % (
                result["torch_version"], result["threads"], result["size"], result["reps"],
                result["warmup"], result["best_gflops"], result["median_gflops"], result["p50_us"]))


def serve(torch, args, a, b, c):
    """The --serve loop: one block per stdin line "WARMUP REPS"."""
    print(json.dumps({"ready": True, "torch_version": torch.__version__,
                      "threads": torch.get_num_threads(), "size": args.size}), flush=True)
    for line in sys.stdin:
        fields = line.split()
        if not fields:
            continue
        try:
            warmup, reps = (int(f) for f in fields)
        except ValueError:
            warmup, reps = -1, -1
        if warmup < 0 or reps <= 0:
            print("w6_gemm.py --serve: want a line \"WARMUP REPS\" (WARMUP >= 0, REPS > 0), got %r"
                  % line.strip(), file=sys.stderr)
            return 2
        lat_ns = run_block(torch, a, b, c, warmup, reps)
        result = block_result(torch, args, a, b, c, lat_ns, warmup)
        print(summary_line(result), file=sys.stderr)
        print(json.dumps(result), flush=True)
    return 0


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Must be set before torch creates its OpenMP pool.
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    n = args.size
    a = torch.rand(n, n, dtype=torch.float32) * 2 - 1
    b = torch.rand(n, n, dtype=torch.float32) * 2 - 1
    c = torch.empty(n, n, dtype=torch.float32)

    if args.serve:
        return serve(torch, args, a, b, c)

    lat_ns = run_block(torch, a, b, c, args.warmup, args.reps)
    result = block_result(torch, args, a, b, c, lat_ns, args.warmup)
    print(summary_line(result))
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
