#!/usr/bin/python3
"""PERF.md W1 "tolaria-ref" workload, PyTorch peer.

Linear(16->4)+bias, cross-entropy (mean), batch 4, 16 samples per epoch
(4 SGD steps, lr 0.01, momentum 0.9), then a validation pass over the same
16 samples (4 batches of 4) under torch.inference_mode (torch.no_grad when
inference_mode is unavailable).  The epoch latency (train + validation +
reading the epoch metrics back as Python numbers) is measured with
time.perf_counter_ns.

    OMP_NUM_THREADS=2 /usr/bin/python3 bench/pytorch/w1_tolaria_ref.py \
        --epochs 2000 --warmup 50 --threads 2 --json /tmp/w1_pytorch.json

--bare drops the per-epoch metrics (train loss, validation loss, validation
accuracy) and keeps only the forward/backward/step and validation forwards.
"""

import argparse
import os
import platform
import sys
import time

from peer_common import percentile, write_json  # noqa: E402


def parse_args(argv):
    ap = argparse.ArgumentParser(description="W1 tolaria-ref, PyTorch peer")
    ap.add_argument("--epochs", type=int, default=2000, help="measured epochs (default 2000)")
    ap.add_argument("--warmup", type=int, default=50, help="unmeasured warm-up epochs (default 50)")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="seed for data and init (default 0)")
    ap.add_argument("--bare", action="store_true",
                    help="no epoch metrics (no loss/accuracy accumulation, no .item())")
    ap.add_argument("--json", metavar="PATH", help="write the result as JSON to PATH")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Must be set before torch creates its OpenMP pool.
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    n_samples, n_in, n_out, batch = 16, 16, 4, 4
    inputs = torch.randn(n_samples, n_in)
    targets = torch.randint(0, n_out, (n_samples,), dtype=torch.int64)
    batches = [(inputs[i:i + batch], targets[i:i + batch]) for i in range(0, n_samples, batch)]

    model = nn.Linear(n_in, n_out, bias=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    eval_ctx = torch.inference_mode if hasattr(torch, "inference_mode") else torch.no_grad

    def epoch_metrics():
        model.train()
        train_loss = torch.zeros(())
        for xb, yb in batches:
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            train_loss += loss.detach()
        model.eval()
        with eval_ctx():
            val_loss = torch.zeros(())
            correct = torch.zeros((), dtype=torch.int64)
            for xb, yb in batches:
                out = model(xb)
                val_loss += F.cross_entropy(out, yb, reduction="sum")
                correct += (out.argmax(dim=1) == yb).sum()
        return (train_loss.item() / len(batches), val_loss.item() / n_samples,
                correct.item() / n_samples)

    def epoch_bare():
        model.train()
        for xb, yb in batches:
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
        model.eval()
        with eval_ctx():
            for xb, yb in batches:
                F.cross_entropy(model(xb), yb, reduction="sum")
        return None

    epoch = epoch_bare if args.bare else epoch_metrics

    for _ in range(args.warmup):
        epoch()

    clock = time.perf_counter_ns
    lat_ns = []
    last = None
    for _ in range(args.epochs):
        t0 = clock()
        last = epoch()
        lat_ns.append(clock() - t0)

    us = sorted(v / 1000.0 for v in lat_ns)
    result = {
        "workload": "W1",
        "peer": "pytorch",
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "epochs": args.epochs,
        "warmup": args.warmup,
        "variant": "bare" if args.bare else "metrics",
        "eval_mode": eval_ctx.__name__,
        "batch": batch,
        "samples_per_epoch": n_samples,
        "optimizer": "SGD lr=0.01 momentum=0.9",
        "p50_us": round(percentile(us, 50), 3),
        "p95_us": round(percentile(us, 95), 3),
        "p99_us": round(percentile(us, 99), 3),
        "max_us": round(us[-1], 3),
        "mean_us": round(sum(us) / len(us), 3),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    if last is not None:
        result["final_train_loss"] = round(last[0], 6)
        result["final_val_loss"] = round(last[1], 6)
        result["final_val_accuracy"] = round(last[2], 6)

    print("W1 pytorch %s (%s, %d threads, %s): %d epochs after %d warm-up: "
          "p50 %.1f us  p95 %.1f us  p99 %.1f us  max %.1f us  mean %.1f us" % (
              torch.__version__, result["variant"], result["threads"], result["eval_mode"],
              args.epochs, args.warmup, result["p50_us"], result["p95_us"], result["p99_us"],
              result["max_us"], result["mean_us"]))
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
