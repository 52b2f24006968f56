#!/usr/bin/python3
"""PERF.md W7 "foreach-optim" workload, PyTorch peer.

One optimizer step over a list of fp32 parameter tensors (by default 200
tensors totalling 10,000,000 parameters; `esper bench` passes the exact
shapes of its side with --shapes), each with a fixed gradient:

  - torch.optim.SGD(lr=0.01, momentum=0.9, foreach=True)
  - torch.optim.AdamW(lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
    weight_decay=0.01, foreach=True)

(foreach=True where the installed torch accepts the flag, else the
default implementation; the JSON says which.)  Parameters are drawn from
N(0, 0.02^2) and gradients from N(0, 0.01^2).  --warmup steps are run
first and not measured; each measured opt.step() is timed with
time.perf_counter_ns.  Bytes moved per step are 5*4 per parameter for
SGD-momentum (read p, g, m; write p, m) and 7*4 for AdamW (read p, g, m,
v; write p, m, v); GB/s is that over the median step time.  The script
also measures its own copy bandwidth: dst.copy_(src) of a --copy-bytes
float32 tensor (default 40 MB), counting read plus written bytes.

    OMP_NUM_THREADS=2 /usr/bin/python3 bench/pytorch/w7_foreach_optim.py \
        --steps 50 --warmup 5 --threads 2 --json /tmp/w7_pytorch.json
"""

import argparse
import inspect
import math
import os
import platform
import sys
import time

from peer_common import percentile, write_json  # noqa: E402


def parse_args(argv):
    ap = argparse.ArgumentParser(description="W7 foreach-optim, PyTorch peer")
    ap.add_argument("--params", type=int, default=10_000_000,
                    help="total parameters when --shapes is not given (default 10,000,000)")
    ap.add_argument("--tensors", type=int, default=200,
                    help="parameter tensors when --shapes is not given (default 200)")
    ap.add_argument("--shapes", default="",
                    help='exact shapes, "RxC,R,..." (esper bench passes its own)')
    ap.add_argument("--steps", type=int, default=50, help="measured steps per optimizer (default 50)")
    ap.add_argument("--warmup", type=int, default=5, help="unmeasured steps per optimizer (default 5)")
    ap.add_argument("--copy-bytes", type=int, default=40_000_000,
                    help="size of the copied buffer for the bandwidth figure (default 40,000,000)")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="seed for parameters and gradients (default 0)")
    ap.add_argument("--json", metavar="PATH", help="write the result as JSON to PATH")
    args = ap.parse_args(argv)
    if args.steps <= 0 or args.warmup < 0 or args.threads <= 0 or args.copy_bytes < 4:
        ap.error("--steps and --threads must be > 0, --warmup >= 0, --copy-bytes >= 4")
    return args


def default_shapes(params, tensors):
    """Equal-ish 1-D shapes when no --shapes are given (the sizes, not the
    shapes, are what an elementwise step depends on)."""
    if tensors < 1 or params < tensors:
        raise SystemExit("need params >= tensors >= 1")
    base = params // tensors
    shapes = [[base] for _ in range(tensors)]
    shapes[-1][0] += params - base * tensors
    return shapes


def parse_shapes(text):
    return [[int(d) for d in part.split("x")] for part in text.split(",") if part]


def summary(lat_ns):
    us = sorted(v / 1000.0 for v in lat_ns)
    return {
        "n": len(us),
        "p50_us": round(percentile(us, 50), 3),
        "p95_us": round(percentile(us, 95), 3),
        "p99_us": round(percentile(us, 99), 3),
        "max_us": round(us[-1], 3),
        "mean_us": round(sum(us) / len(us), 3),
    }


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Must be set before torch creates its OpenMP pool.
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    clock = time.perf_counter_ns

    shapes = parse_shapes(args.shapes) if args.shapes else default_shapes(args.params, args.tensors)
    n_params = sum(math.prod(s) for s in shapes)

    # Copy bandwidth of this process: dst.copy_(src), read + write bytes.
    n_copy = args.copy_bytes // 4
    src = torch.arange(n_copy, dtype=torch.float32)
    dst = torch.empty_like(src)
    for _ in range(2):
        dst.copy_(src)
    copy_ns = []
    for _ in range(max(args.steps, 5)):
        t0 = clock()
        dst.copy_(src)
        copy_ns.append(clock() - t0)
    copy_lat = summary(copy_ns)
    copy_gbps = 2 * 4 * n_copy / (copy_lat["p50_us"] * 1e-6) / 1e9
    del src, dst

    def make(name):
        params = []
        for s in shapes:
            p = torch.nn.Parameter(torch.randn(*s) * 0.02)
            p.grad = torch.randn(*s) * 0.01
            params.append(p)
        if name == "SGD-momentum":
            cls, kw, bpp = torch.optim.SGD, dict(lr=0.01, momentum=0.9), 5 * 4
        else:
            cls, kw, bpp = torch.optim.AdamW, dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01), 7 * 4
        foreach = "foreach" in inspect.signature(cls).parameters
        if foreach:
            kw["foreach"] = True
        return params, cls(params, **kw), bpp, foreach

    results = {}
    for name in ("SGD-momentum", "AdamW"):
        params, opt, bpp, foreach = make(name)
        before = [p.detach().clone() for p in params]
        for _ in range(args.warmup):
            opt.step()
        lat_ns = []
        for _ in range(args.steps):
            t0 = clock()
            opt.step()
            lat_ns.append(clock() - t0)
        lat = summary(lat_ns)
        changed = sum(int((p.detach() != b).sum()) for p, b in zip(params, before))
        bytes_per_step = bpp * n_params
        gbps = bytes_per_step / (lat["p50_us"] * 1e-6) / 1e9
        results[name] = {
            "optimizer": name,
            "foreach": foreach,
            "step_latency": lat,
            "bytes_per_param": bpp,
            "bytes_per_step": bytes_per_step,
            "gbps": round(gbps, 3),
            "fraction_of_copy": round(gbps / copy_gbps, 4),
            "changed_fraction": changed / n_params,
        }
        del params, opt, before

    result = {
        "workload": "W7",
        "peer": "pytorch",
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "params": n_params,
        "tensors": len(shapes),
        "steps": args.steps,
        "warmup": args.warmup,
        "copy_bytes": 4 * n_copy,
        "copy_latency": copy_lat,
        "copy_gbps": round(copy_gbps, 3),
        "sgd_momentum": results["SGD-momentum"],
        "adamw": results["AdamW"],
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    print("W7 pytorch %s (%d threads): %d params in %d tensors, %d steps after %d warm-up: "
          "SGD-momentum p50 %.2f ms (%.1f GB/s, foreach=%s)  AdamW p50 %.2f ms (%.1f GB/s, foreach=%s)  "
          "copy_ %.1f GB/s" % (
              torch.__version__, result["threads"], n_params, len(shapes), args.steps, args.warmup,
              results["SGD-momentum"]["step_latency"]["p50_us"] / 1e3, results["SGD-momentum"]["gbps"],
              results["SGD-momentum"]["foreach"],
              results["AdamW"]["step_latency"]["p50_us"] / 1e3, results["AdamW"]["gbps"],
              results["AdamW"]["foreach"], copy_gbps))
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
