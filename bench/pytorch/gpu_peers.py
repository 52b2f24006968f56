#!/usr/bin/env python3
"""PERF.md GPU peers (W1, W5, W6, W7, W8) for the CUDA issue, PyTorch 2.x.

One script, one workload per subcommand; each prints a short table and,
with --json, writes its figures.  Timing uses CUDA events after warm-up;
medians and p95 are reported.  Inputs are random (never zeros).

  w1  the W1 tolaria-ref epoch (Linear(16->4)+bias, cross-entropy, batch 4,
      16 samples, SGD momentum 0.9 lr 0.01, then a validation pass) in three
      modes: eager, torch.compile(mode="reduce-overhead") of the epoch, and
      a CUDA graph of the epoch captured with torch.cuda.graph (static
      inputs, capturable optimizer).  Metric: epoch latency p50/p95 in us.
  w5  the W5 host-train CNN (w5_host_train.py's build_host: 3 x [Conv3x3 no
      bias -> BatchNorm2d -> ReLU -> MaxPool2d 2] of 32/64/128 channels, global
      average pool, Linear(128->10)) on 1x28x28 batches of 128: training
      (cross-entropy, SGD lr 0.01 momentum 0.9) and evaluation (eval mode,
      inference_mode forward) in three modes: eager, torch.compile (default
      mode) and torch.compile(mode="reduce-overhead").  TF32 on for matmuls
      and convolutions, cudnn.benchmark on.  Batches come from pinned host
      memory, copied on a side stream while the previous step computes (the
      usual prefetcher: wait_stream + record_stream).  Timing: CUDA events
      around windows of --window steps of the running pipeline.  Metric:
      training and evaluation samples/s (batch x steps over the summed
      window times), per-step p50/p95 of the windows.
  w6  bf16 and TF32 GEMM 8192^3 with torch.matmul (TF32 through
      torch.backends.cuda.matmul.allow_tf32).  Metric: TFLOP/s.
  w7  SGD-momentum and AdamW (foreach=True) steps over 200 fp32 tensors
      totalling 10M parameters, with the number of kernel launches per step
      counted by torch.profiler, and a device copy of the same bytes as the
      bandwidth reference.  Metric: ms per step, GB/s, launches.
  w8  host->device copies of 128x1x28x28 fp32 batches, pinned vs pageable
      (non_blocking), GB/s.

    python3 gpu_peers.py w1 --json out/w1.json

--device cpu --smoke runs a tiny version of each on the CPU (no compile,
no graphs, no events) to check the script itself on a machine without a
GPU.
"""

import argparse
import json
import statistics
import sys
import time

from peer_common import percentile, write_json  # noqa: E402


class Timer:
    """CUDA-event timer on the GPU, perf_counter on the CPU."""

    def __init__(self, torch, cuda):
        self.torch, self.cuda = torch, cuda

    def time(self, fn, reps):
        out = []
        for _ in range(reps):
            if self.cuda:
                a = self.torch.cuda.Event(enable_timing=True)
                b = self.torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                out.append(a.elapsed_time(b) * 1e3)  # us
            else:
                t = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t) * 1e6)
        return out


def w1(args, torch, dev, timer):
    import torch.nn.functional as F

    n, n_in, n_out, batch = 16, 16, 4, 4
    g = torch.Generator(device="cpu").manual_seed(args.seed)
    x = torch.randn(n, n_in, generator=g).to(dev)
    y = torch.randint(0, n_out, (n,), generator=g).to(dev)
    results = {}

    def make():
        lin = torch.nn.Linear(n_in, n_out).to(dev)
        opt = torch.optim.SGD(lin.parameters(), lr=0.01, momentum=0.9)
        return lin, opt

    def epoch(lin, opt, met, none=False):
        met.zero_()
        for s in range(n // batch):
            xb, yb = x[s * batch:(s + 1) * batch], y[s * batch:(s + 1) * batch]
            opt.zero_grad(set_to_none=none)
            loss = F.cross_entropy(lin(xb), yb)
            loss.backward()
            opt.step()
            met[0] += loss.detach()
        with torch.no_grad():
            for s in range(n // batch):
                xb, yb = x[s * batch:(s + 1) * batch], y[s * batch:(s + 1) * batch]
                logits = lin(xb)
                met[1] += F.cross_entropy(logits, yb, reduction="sum")
                met[2] += (logits.argmax(1) == yb).sum()
        return met

    def run_mode(mode):
        lin, opt = make()
        met = torch.zeros(3, device=dev)
        fn = lambda: epoch(lin, opt, met)
        if mode == "reduce-overhead":
            # The model compiled with CUDA graphs, the loss, backward and
            # optimizer eager, a new graph step before each call and the
            # gradients set to None (W5's form: a kept gradient is the
            # backward graph's output, which the next step overwrites).
            # Compiling the whole step broke the graph after zero_grad and
            # PyTorch 2.11 then refused to read the loss of the overwritten
            # graph; zeroing kept gradients in place was refused the same
            # way (the 2026-11-26 GPU runs); compiling the epoch replays
            # the backward four times within one step.
            cfwd = torch.compile(lin, mode="reduce-overhead")

            def model(xb):
                torch.compiler.cudagraph_mark_step_begin()
                return cfwd(xb)

            fn = lambda: epoch(model, opt, met, none=True)
        if mode == "cuda-graph":
            # Warm up on a side stream so the optimizer state exists, then
            # capture the whole epoch; replay is the measured call.
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    epoch(lin, opt, met)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                epoch(lin, opt, met)
            fn = graph.replay
        for _ in range(args.warmup):
            fn()
        ts = timer.time(lambda: (fn(), met.tolist()), args.reps)
        return {"p50_us": statistics.median(ts), "p95_us": percentile(sorted(ts), 95)}

    modes = args.modes.split(",") if args.modes else (
        ["eager"] if args.smoke else ["eager", "reduce-overhead", "cuda-graph"])
    for mode in modes:
        # A mode that fails is recorded with its error and the others still
        # run: one PyTorch regression must not cost the whole peer.
        try:
            results[mode] = run_mode(mode)
        except Exception as e:  # noqa: BLE001 - recorded, and main exits non-zero
            results[mode] = {"error": f"{type(e).__name__}: {e}"[:2000]}
            print(f"w1: mode {mode} failed: {type(e).__name__}: {e}", file=sys.stderr)
    return results


def w5(args, torch, dev, timer):
    import torch.nn.functional as F
    from w5_host_train import build_host, w5_pools

    cuda = dev.type == "cuda"
    if args.smoke:
        args.batch, args.steps, args.eval_batches, args.eval_warmup, args.window = 8, 2, 2, 1, 1
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    train_pool, eval_pool, data, note = w5_pools(args, torch)
    if cuda:
        train_pool = [(x.pin_memory(), y.pin_memory()) for x, y in train_pool]
        eval_pool = [(x.pin_memory(), y.pin_memory()) for x, y in eval_pool]
    copy_stream = torch.cuda.Stream() if cuda else None

    def fetch(pool, i, labels):
        """Starts the copy of batch i on the side stream (returns the device tensors)."""
        xh, yh = pool[i % len(pool)]
        if not cuda:
            return xh, yh
        with torch.cuda.stream(copy_stream):
            return xh.to(dev, non_blocking=True), (yh.to(dev, non_blocking=True) if labels else None)

    def ready(batch):
        """Orders the compute stream after the batch's copy."""
        if cuda:
            cur = torch.cuda.current_stream()
            cur.wait_stream(copy_stream)
            for t in batch:
                if t is not None:
                    t.record_stream(cur)
        return batch

    def windows(total, measured, step, pool, labels):
        """Runs total steps as a pipeline (the copy of batch i+1 issued before
        step i); the last `measured` are timed in windows of args.window."""
        nxt = fetch(pool, 0, labels)
        out, i, first = None, 0, None

        def one():
            nonlocal nxt, out, i
            cur = ready(nxt)
            if i + 1 < total:
                nxt = fetch(pool, i + 1, labels)
            out = step(*cur)
            i += 1

        for _ in range(total - measured):
            one()
            if first is None and out is not None and out.dim() == 0:
                first = out.item()
        win = max(1, min(args.window, measured))
        n_win = max(1, measured // win)

        def window():
            for _ in range(win):
                one()

        ts = timer.time(window, n_win)
        per_step = sorted(t / win for t in ts)
        return {"samples_per_second": args.batch * win * n_win / (sum(ts) * 1e-6),
                "p50_us": statistics.median(per_step), "p95_us": percentile(per_step, 95),
                "window_steps": win, "windows": n_win}, first, out

    modes = ["eager"] if args.smoke else ["eager", "compile", "reduce-overhead"]
    out = {"batch": args.batch, "steps": args.steps, "warmup": args.warmup, "eval_batches": args.eval_batches,
           "eval_warmup": args.eval_warmup, "data": data, "data_note": note,
           "tf32": cuda, "cudnn_benchmark": cuda,
           "feed": "pinned host batches, copied on a side stream one step ahead" if cuda else "host batches (CPU smoke run)"}
    for mode in modes:
        torch.manual_seed(args.seed)
        model = build_host(torch).to(dev)
        out["params"] = sum(p.numel() for p in model.parameters())
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        fwd = model
        if mode == "compile":
            fwd = torch.compile(model)
        elif mode == "reduce-overhead":
            fwd = torch.compile(model, mode="reduce-overhead")

        def mark():
            if mode == "reduce-overhead":
                # A new step for the compiled model's CUDA graphs.
                torch.compiler.cudagraph_mark_step_begin()

        def train_step(xb, yb):
            mark()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(fwd(xb), yb)
            loss.backward()
            opt.step()
            return loss.detach()

        def eval_step(xb, _):
            mark()
            return fwd(xb)

        model.train()
        tr, first, last = windows(args.warmup + args.steps, args.steps, train_step, train_pool, True)
        tr["first_loss"], tr["final_loss"] = first, last.item()
        model.eval()
        with torch.inference_mode():
            ev, _, _ = windows(args.eval_warmup + args.eval_batches, args.eval_batches, eval_step, eval_pool, False)
        out[mode] = {"train": tr, "eval": ev}
    return out


def w6(args, torch, dev, timer):
    n = 256 if args.smoke else args.size
    out = {}
    for name, dt, tf32 in [("bf16", torch.bfloat16, False), ("tf32", torch.float32, True)]:
        if dev.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(n, n, device=dev).to(dt)
        b = torch.randn(n, n, device=dev).to(dt)
        c = torch.empty(n, n, device=dev, dtype=dt)
        f = lambda: torch.matmul(a, b, out=c)
        for _ in range(args.warmup):
            f()
        ts = timer.time(f, args.reps)
        med = statistics.median(ts)
        out[name] = {"n": n, "median_us": med, "tflops": 2 * n ** 3 / (med * 1e-6) / 1e12}
    return out


def w7(args, torch, dev, timer):
    total = 100_000 if args.smoke else 10_000_000
    k = 200
    sizes = [total // k] * k
    params = [torch.randn(s, device=dev, requires_grad=True) for s in sizes]
    for p in params:
        p.grad = torch.randn_like(p)
    out = {}
    for name, opt in [("sgd_momentum", torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=True)),
                      ("adamw", torch.optim.AdamW(params, lr=1e-3, foreach=True))]:
        for _ in range(max(2, args.warmup)):
            opt.step()
        ts = timer.time(opt.step, args.reps)
        med = statistics.median(ts)
        # bytes per step: SGD reads p, g, buf and writes p, buf; AdamW reads
        # p, g, m, v and writes p, m, v.
        words = 5 if name == "sgd_momentum" else 7
        launches = None
        if dev.type == "cuda" and not args.smoke:
            from torch.profiler import profile, ProfilerActivity
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                opt.step()
                torch.cuda.synchronize()
            launches = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
        out[name] = {"median_ms": med / 1e3, "gbps": words * 4 * total / (med * 1e-6) / 1e9, "launches": launches}
    src = torch.randn(total, device=dev)
    dst = torch.empty_like(src)
    ts = timer.time(lambda: dst.copy_(src), args.reps)
    med = statistics.median(ts)
    out["copy"] = {"median_ms": med / 1e3, "gbps": 2 * 4 * total / (med * 1e-6) / 1e9}
    return out


def w8(args, torch, dev, timer):
    shape = (128, 1, 28, 28)
    nbytes = 128 * 28 * 28 * 4
    out = {}
    for name, pin in [("pageable", False), ("pinned", True)]:
        h = torch.randn(*shape)
        if pin and dev.type == "cuda":
            h = h.pin_memory()
        d = torch.empty(*shape, device=dev)
        f = lambda: d.copy_(h, non_blocking=pin)
        for _ in range(args.warmup):
            f()
        ts = timer.time(f, args.reps)
        med = statistics.median(ts)
        out[name] = {"median_us": med, "gbps": nbytes / (med * 1e-6) / 1e9}
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload", choices=["w1", "w5", "w6", "w7", "w8"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--size", type=int, default=8192, help="W6 n of n x n x n (default 8192)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=128, help="W5 batch (default 128)")
    ap.add_argument("--steps", type=int, default=200, help="W5 measured training steps (default 200; --warmup before)")
    ap.add_argument("--eval-batches", type=int, default=200, help="W5 measured evaluation batches (default 200)")
    ap.add_argument("--eval-warmup", type=int, default=5, help="W5 unmeasured evaluation batches (default 5)")
    ap.add_argument("--window", type=int, default=10, help="W5 steps per timed window (default 10)")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist", help="W5 Fashion-MNIST IDX files")
    ap.add_argument("--random", action="store_true", help="W5 on N(0,1) images and uniform labels")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, eager only (checks the script)")
    ap.add_argument("--modes", help="W1 modes, comma-separated (default eager,reduce-overhead,cuda-graph; eager with --smoke)")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    if args.smoke:
        args.reps, args.warmup = min(args.reps, 5), min(args.warmup, 2)

    import torch

    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_peers.py: no CUDA device (use --device cpu --smoke to check the script)")
    timer = Timer(torch, dev.type == "cuda")
    res = {"w1": w1, "w5": w5, "w6": w6, "w7": w7, "w8": w8}[args.workload](args, torch, dev, timer)
    report = {"workload": args.workload.upper(), "torch": torch.__version__, "device": str(dev),
              "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
              "results": res}
    print(json.dumps(report, indent=1))
    if args.json:
        write_json(args.json, report)
    failed = [m for m, r in res.items() if isinstance(r, dict) and "error" in r]
    if failed:
        sys.exit(f"gpu_peers.py {args.workload}: mode(s) {', '.join(failed)} failed (the others' figures are written)")


if __name__ == "__main__":
    main(sys.argv[1:])
