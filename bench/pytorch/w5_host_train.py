#!/usr/bin/python3
"""PERF.md W5 "host-train" workload, PyTorch peer.

The kasmina CNN host of `esper bench --workload W5` (kasmina/host_cnn.go
with InChannels 1, Classes 10, Blocks 3, BaseChannels 32, kernel 3):

    3 x [Conv2d(k3, padding 1, bias=False) -> BatchNorm2d -> ReLU -> MaxPool2d(2)]
        with 32, 64, 128 channels (28 -> 14 -> 7 -> 3 pixels a side),
    global average pool, Linear(128 -> 10)

on 1x28x28 images, batch 128.  Training: zero_grad(set_to_none=True),
forward, F.cross_entropy (mean), backward, SGD (lr 0.01, momentum 0.9)
step, in train mode; each step is timed with time.perf_counter_ns and
--warmup steps are run first.  Evaluation: model.eval() and a forward pass
under torch.inference_mode() per batch (torch.no_grad() where unavailable),
--eval-warmup batches first.  Samples/s = batch / mean time per step
(batch).

Data: Fashion-MNIST read from the IDX files in --data-dir (gzip or raw,
normalised with mean 0.2860 and std 0.3530) when they are there, training
batches from the training set and evaluation batches from the test set;
with --random, or when the files are missing, N(0, 1) images and uniform
labels.  A pool of at most 8 batches per phase is cycled through (speed
does not depend on the content).

    OMP_NUM_THREADS=2 /usr/bin/python3 bench/pytorch/w5_host_train.py \
        --batch 128 --steps 20 --warmup 5 --eval-batches 20 --threads 2 \
        --json /tmp/w5_pytorch.json
"""

import argparse
import gzip
import os
import platform
import struct
import sys
import time

from peer_common import percentile, write_json  # noqa: E402

POOL = 8
MEAN, STD = 0.2860, 0.3530


def parse_args(argv):
    ap = argparse.ArgumentParser(description="W5 host-train, PyTorch peer")
    ap.add_argument("--batch", type=int, default=128, help="samples per batch (default 128)")
    ap.add_argument("--steps", type=int, default=20, help="measured training steps (default 20)")
    ap.add_argument("--warmup", type=int, default=5, help="unmeasured training steps (default 5)")
    ap.add_argument("--eval-batches", type=int, default=20, help="measured evaluation batches (default 20)")
    ap.add_argument("--eval-warmup", type=int, default=2, help="unmeasured evaluation batches (default 2)")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist",
                    help="Fashion-MNIST IDX files (default /usr/share/datasets/fashion-mnist)")
    ap.add_argument("--random", action="store_true", help="use N(0,1) images and uniform labels")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="seed for init, data order and random data (default 0)")
    ap.add_argument("--json", metavar="PATH", help="write the result as JSON to PATH")
    args = ap.parse_args(argv)
    if min(args.batch, args.steps, args.eval_batches, args.threads) <= 0 or min(args.warmup, args.eval_warmup) < 0:
        ap.error("--batch, --steps, --eval-batches and --threads must be > 0, warm-ups >= 0")
    return args


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


def read_idx(torch, directory, base):
    """Reads base.gz or base from directory as a uint8 tensor."""
    for name, opener in ((base + ".gz", gzip.open), (base, open)):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            with opener(path, "rb") as f:
                raw = f.read()
            magic, = struct.unpack(">I", raw[:4])
            ndim = magic & 0xFF
            dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
            t = torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8)
            return t.reshape(*dims)
    raise FileNotFoundError(os.path.join(directory, base + "[.gz]"))


def build_host(torch, in_channels=1, classes=10, blocks=3, base=32, kernel=3):
    nn = torch.nn
    layers, cin = [], in_channels
    for i in range(blocks):
        cout = base << i
        layers += [nn.Conv2d(cin, cout, kernel, padding=kernel // 2, bias=False),
                   nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def w5_pools(args, torch):
    """The W5 batch pools (train, eval) with the data kind and a note:
    Fashion-MNIST from --data-dir when its IDX files are there (unless
    --random), train batches from the training set and eval batches from
    the test set in random order, else N(0, 1) images and uniform labels;
    at most POOL batches per phase, drawn from a generator seeded with
    --seed + 1 (gpu_peers.py's w5 uses the same pools)."""
    b = args.batch
    g = torch.Generator().manual_seed(args.seed + 1)
    n_train, n_eval = min(POOL, args.warmup + args.steps), min(POOL, args.eval_warmup + args.eval_batches)
    data, note = "random-normal", "random N(0,1) images and uniform labels (requested)"
    sets = {}
    if not args.random:
        try:
            for split, prefix in (("train", "train"), ("test", "t10k")):
                sets[split] = (read_idx(torch, args.data_dir, prefix + "-images-idx3-ubyte"),
                               read_idx(torch, args.data_dir, prefix + "-labels-idx1-ubyte"))
            data = "fashion-mnist"
            note = "Fashion-MNIST from %s (train batches from the training set, eval batches from the test set, random order)" % args.data_dir
        except (OSError, ValueError, RuntimeError) as e:
            note = "random N(0,1) images and uniform labels: Fashion-MNIST unavailable (%s)" % e

    def pool(split, n):
        if data == "fashion-mnist":
            x, y = sets[split]
            perm = torch.randperm(x.shape[0], generator=g)[:n * b]
            xs = ((x[perm].float() / 255.0 - MEAN) / STD).reshape(n, b, 1, 28, 28)
            ys = y[perm].long().reshape(n, b)
            return [(xs[i].contiguous(), ys[i].contiguous()) for i in range(n)]
        return [(torch.randn(b, 1, 28, 28, generator=g), torch.randint(0, 10, (b,), generator=g))
                for _ in range(n)]

    return pool("train", n_train), pool("test", n_eval), data, note


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Must be set before torch creates its OpenMP pool.
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    b = args.batch
    train_pool, eval_pool, data, note = w5_pools(args, torch)

    model = build_host(torch)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    eval_ctx = torch.inference_mode if hasattr(torch, "inference_mode") else torch.no_grad
    clock = time.perf_counter_ns

    def train_step(i):
        xb, yb = train_pool[i % len(train_pool)]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    model.train()
    first_loss = None
    for i in range(args.warmup):
        loss = train_step(i)
        if i == 0:
            first_loss = loss.item()
    train_ns = []
    for i in range(args.steps):
        t0 = clock()
        loss = train_step(args.warmup + i)
        train_ns.append(clock() - t0)
    final_loss = loss.item()

    model.eval()
    with eval_ctx():
        for i in range(args.eval_warmup):
            model(eval_pool[i % len(eval_pool)][0])
        eval_ns = []
        for i in range(args.eval_batches):
            xb = eval_pool[(args.eval_warmup + i) % len(eval_pool)][0]
            t0 = clock()
            model(xb)
            eval_ns.append(clock() - t0)

    train_lat, eval_lat = summary(train_ns), summary(eval_ns)
    result = {
        "workload": "W5",
        "peer": "pytorch",
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "batch": b,
        "steps": args.steps,
        "warmup": args.warmup,
        "eval_batches": args.eval_batches,
        "eval_warmup": args.eval_warmup,
        "data": data,
        "data_note": note,
        "params": params,
        "optimizer": "SGD lr=0.01 momentum=0.9",
        "eval_mode": eval_ctx.__name__,
        "train_step_latency": train_lat,
        "train_samples_per_second": round(b / (train_lat["mean_us"] * 1e-6), 3),
        "eval_batch_latency": eval_lat,
        "eval_samples_per_second": round(b / (eval_lat["mean_us"] * 1e-6), 3),
        "first_loss": first_loss,
        "final_loss": final_loss,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    print("W5 pytorch %s (%d threads, %s, %d params): batch %d, %d steps after %d warm-up: "
          "train %.0f samples/s (p50 %.1f ms); eval %.0f samples/s (p50 %.1f ms); loss %.3f -> %.3f" % (
              torch.__version__, result["threads"], data, params, b, args.steps, args.warmup,
              result["train_samples_per_second"], train_lat["p50_us"] / 1e3,
              result["eval_samples_per_second"], eval_lat["p50_us"] / 1e3,
              first_loss if first_loss is not None else float("nan"), final_loss))
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
