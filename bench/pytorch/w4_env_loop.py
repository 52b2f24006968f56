#!/usr/bin/python3
"""PERF.md W4 "simic-ppo" workload, PyTorch peer: the bare env-epoch loop.

The bare loop of `esper bench --workload W4` (bench/w4.go) in plain torch
on the CPU, or with --device cuda on the GPU (every host, seed, optimizer,
the policy and the data there; the epoch's permutation drawn on the host
and uploaded once per epoch; the device waited for at the end of each
env-epoch and lock-step step, so that the clock covers its work): --envs environments stepped in lock-step, each with its own
CNN host and SGD optimizer, sharing one data stream.  One lock-step step
is one batched policy forward over every environment's observation graph
(an action sampled from each head's softmax, no masks), then, for
each environment in turn, one env-epoch:

  1. training: model.train(), a fresh random permutation of the --train
     samples cut into --train // --batch batches (the last partial batch
     dropped, as simic's loader does); per batch zero_grad, forward,
     F.cross_entropy (mean), backward, the gradient clipped to norm 1.0,
     SGD step (lr 0.01, momentum 0.9, weight decay 5e-4): tolaria's host
     defaults (G2 per-batch step); the loss summed on the tensor side;
     with seeds (below), each trainable seed has its own SGD (lr 0.01,
     momentum 0.9) and its own clipping, as tolaria's seed optimizers;
  2. validation: model.eval(), inference mode, the --val samples in
     batches of --batch, loss and correct count accumulated as tensors
     and read once (.item()) per epoch, as tolaria reads them once;
  3. tolaria's per-seed ablation passes: --ablations[i] more validation
     passes, each with one seed's alpha forced to 0 (those the fused
     validation did not provide; normally none);
  4. the fused counterfactual validation: when --configs[i] = K > 0, per
     validation batch of B samples one forward of the batch repeated K
     times (index_select, K*B samples) with per-sample alpha overrides
     for the seeds at alpha > 0, correct counts accumulated per sample on
     the tensor side and read once at the end;
  5. the governor's snapshot every 5 epochs (a clone of the state dict);
  6. after --max-epochs epochs the episode ends and the environment gets
     a fresh host and optimizer (simic's Reset).

--configs, --ablations and --seeds-file are the per-env-epoch work of our
measured run (bench.W4Work), replayed in order and cycled; esper bench
passes them.  --seeds-file lists, per env-epoch, the seeds that epoch ran
(bench.W4Seed: slot, blueprint, channels, stage, alpha, blend, gradient
isolation, trainable, parameter count); the peer builds the same kasmina
modules in torch (w4_seeds.py: the cnn blueprint catalog and the
GatedBlend, parameter counts checked against ours) when a seed first
appears in an environment, drops them when it is gone, and blends them
into the host's pre-pool activations as kasmina.Slot.Forward does
(straight-through at alpha 0 in TRAINING, ADD / MULTIPLY / GATE blends,
detached seed input where isolated).

Identical to our side: the host network (bench/pytorch/w5_host_train.py's
build_host with --base-channels 8 and --blocks 3: Conv3x3 no bias ->
BatchNorm2d -> ReLU -> MaxPool2d per block, global average pool, Linear;
the parameter count is reported and checked), the seeds' modules, blends
and optimizers, the data shapes (1x28x28, 10 classes), the batch size and
batch counts, the optimizers and clipping, the number of validation and
counterfactual forwards and their sample counts, the episode length, and
the policy network (bench/pytorch/w2_gnn.py's build with our W4 widths,
run on our environments' batched observation graph from --graphs-file;
its parameter count is reported and checked).

Not identical:
  - the data are N(0, 1) images and uniform labels, not the synthetic
    Gabor task (speed does not depend on the pixel values);
  - the seeds' parameters start from torch's default initialisation, not
    kasmina's (speed does not depend on their values), and their
    lifecycle is replayed from the trace, not decided;
  - the policy input is fixed (our last observation graph) instead of
    being encoded from each epoch's state, and the sampled actions are
    not executed (no germination, no lifecycle, no rewards, no tracker,
    no telemetry, no deadlines, no epoch goroutine);
  - no governor vital-sign checks or rollbacks beyond the snapshot, no
    gradient telemetry (tolaria reads the seeds' gradient norms every
    10th step).

    OMP_NUM_THREADS=2 /usr/bin/python3 bench/pytorch/w4_env_loop.py \\
        --graphs-file /tmp/w4_graphs.json --seeds-file /tmp/w4_seeds.json \\
        --envs 4 --steps 12 --warmup 2 \\
        --threads 2 --json /tmp/w4_pytorch.json
"""

import argparse
import json
import math
import os
import platform
import sys
import time

from peer_common import peer_device, write_json  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import w2_gnn  # noqa: E402  (the policy network and its graph input)
import w4_seeds  # noqa: E402  (kasmina's cnn seeds and slot blend)
import w5_host_train  # noqa: E402  (the CNN host)

CLASSES, SIDE = 10, 28
SNAPSHOT_EVERY = 5  # tolaria: the governor snapshots every 5th epoch
# tolaria's host optimizer and clipping defaults (G2 per-batch step)
HOST_LR, HOST_MOMENTUM, HOST_WEIGHT_DECAY, MAX_GRAD_NORM = 0.01, 0.9, 5e-4, 1.0
# tolaria's per-seed optimizer defaults
SEED_LR, SEED_MOMENTUM = 0.01, 0.9


def int_list(s):
    return [int(v) for v in s.split(",") if v != ""]


def parse_args(argv):
    ap = argparse.ArgumentParser(description="W4 env-epoch loop, PyTorch peer")
    ap.add_argument("--graphs-file", required=True, help="JSON written by esper bench (policy options and graph)")
    ap.add_argument("--seeds-file", help="JSON written by esper bench: the seeds of each env-epoch (none: seedless hosts)")
    ap.add_argument("--envs", type=int, default=4, help="lock-step environments (default 4)")
    ap.add_argument("--blocks", type=int, default=3, help="CNN host blocks (default 3)")
    ap.add_argument("--base-channels", type=int, default=8, help="CNN host base width (default 8)")
    ap.add_argument("--train", type=int, default=1024, help="training samples (default 1024)")
    ap.add_argument("--val", type=int, default=512, help="validation samples (default 512)")
    ap.add_argument("--batch", type=int, default=128, help="batch size (default 128)")
    ap.add_argument("--max-epochs", type=int, default=12, help="episode length in epochs (default 12)")
    ap.add_argument("--steps", type=int, default=12, help="measured lock-step steps (default 12)")
    ap.add_argument("--warmup", type=int, default=2, help="unmeasured lock-step steps (default 2)")
    ap.add_argument("--configs", default="0", help="fused counterfactual configurations per env-epoch, comma-separated, cycled")
    ap.add_argument("--ablations", default="0", help="per-seed ablation validation passes per env-epoch, comma-separated, cycled")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]: every model, optimizer and "
                    "data tensor there")
    ap.add_argument("--json", metavar="PATH", help="write the result as JSON to PATH")
    args = ap.parse_args(argv)
    if min(args.envs, args.blocks, args.base_channels, args.train, args.val, args.batch, args.max_epochs,
           args.steps, args.threads) <= 0 or args.warmup < 0:
        ap.error("sizes, --steps and --threads must be > 0, --warmup >= 0")
    if args.train < args.batch:
        ap.error("--train must hold at least one --batch")
    args.configs, args.ablations = int_list(args.configs) or [0], int_list(args.ablations) or [0]
    if min(args.configs + args.ablations) < 0:
        ap.error("--configs and --ablations must not be negative")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Must be set before torch creates its OpenMP pool.
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    import torch
    import torch.nn.functional as F

    dev, cuda = peer_device(torch, "w4_env_loop.py", args.device)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    # The host generator draws the data and the permutations (uploaded
    # once per epoch); the device one samples the policy's actions.
    g = torch.Generator().manual_seed(args.seed + 1)
    gd = torch.Generator(device=dev).manual_seed(args.seed + 2) if cuda else g
    infer = torch.inference_mode if hasattr(torch, "inference_mode") else torch.no_grad
    clock = time.perf_counter_ns

    def sync():
        """Waits for the device, so that a clock reading covers its work."""
        if cuda:
            torch.cuda.synchronize(dev)

    train_x = torch.randn(args.train, 1, SIDE, SIDE, generator=g).to(dev)
    train_y = torch.randint(0, CLASSES, (args.train,), generator=g).to(dev)
    val_x = torch.randn(args.val, 1, SIDE, SIDE, generator=g).to(dev)
    val_y = torch.randint(0, CLASSES, (args.val,), generator=g).to(dev)
    val_batches = [(val_x[i:i + args.batch], val_y[i:i + args.batch]) for i in range(0, args.val, args.batch)]
    n_train_batches = args.train // args.batch

    with open(args.graphs_file) as f:
        spec = json.load(f)
    popts = spec["options"]
    policy = w2_gnn.build(torch, popts).eval().to(dev)
    policy_params = sum(p.numel() for p in policy.parameters())
    graph = w2_gnn.graph_tensors(torch, spec["graphs"][str(args.envs)], popts["node_widths"], popts["edge_features"],
                                 dev)

    seed_trace = [[]]
    if args.seeds_file:
        with open(args.seeds_file) as f:
            seed_trace = json.load(f)["seeds"] or [[]]

    def new_host():
        m = w5_host_train.build_host(torch, in_channels=1, classes=CLASSES, blocks=args.blocks,
                                     base=args.base_channels).to(dev)
        return m, torch.optim.SGD(m.parameters(), lr=HOST_LR, momentum=HOST_MOMENTUM, weight_decay=HOST_WEIGHT_DECAY)

    envs = [dict(zip(("model", "opt"), new_host()), epoch=0, seeds={}) for _ in range(args.envs)]
    host_params = sum(p.numel() for p in envs[0]["model"].parameters())
    counts = {"configs": 0, "ablations": 0, "episodes": 0, "seeds": 0, "seed_params": 0}
    phase_ns = {"policy": 0, "train": 0, "validation": 0, "ablation": 0, "fused": 0}
    work = {"i": 0}
    # The host's layers: per block Conv, BatchNorm, ReLU, MaxPool (the
    # pre-pool slot is after the ReLU), then the head.
    block_len, pre_pool = 4, 2

    def sync_seeds(env, specs):
        """Builds the seeds of specs that env lacks, drops those it no
        longer runs, and returns [(spec, seed)] in slot order."""
        live = {}
        for sp in specs:
            sd = env["seeds"].get(sp["id"])
            if sd is None:
                mod = w4_seeds.build_seed(torch, sp["blueprint"], sp["channels"]).to(dev)
                gate = w4_seeds.build_gate(torch, sp["channels"]).to(dev) if sp["blend"] == "gate" else None
                params = list(mod.parameters()) + (list(gate.parameters()) if gate is not None else [])
                n = sum(p.numel() for p in params)
                if n != sp["params"]:
                    raise SystemExit("w4_env_loop: seed %s (%s, %d channels, %s blend) has %d parameters, ours %d" % (
                        sp["id"], sp["blueprint"], sp["channels"], sp["blend"], n, sp["params"]))
                sd = {"mod": mod, "gate": gate, "params": params, "opt": None}
            for p in sd["params"]:
                p.requires_grad_(sp["trainable"])
            if sp["trainable"] and sd["params"] and sd["opt"] is None:
                sd["opt"] = torch.optim.SGD(sd["params"], lr=SEED_LR, momentum=SEED_MOMENTUM)
            if not sp["trainable"]:
                sd["opt"] = None
            sd["spec"] = sp
            live[sp["id"]] = sd
        env["seeds"] = live
        return sorted(live.values(), key=lambda sd: sd["spec"]["slot"])

    def forward(model, seeds, x, alphas=None):
        """The host with its seeds blended into the pre-pool activations;
        alphas maps a seed id to a per-sample alpha override."""
        layers = list(model.children())
        h = x
        for li, layer in enumerate(layers):
            h = layer(h)
            blk, pos = divmod(li, block_len)
            if pos == pre_pool and blk < args.blocks:
                for sd in seeds:
                    if sd["spec"]["slot"] == blk:
                        a = alphas.get(sd["spec"]["id"]) if alphas else None
                        h = w4_seeds.slot_forward(torch, sd["spec"], sd["mod"], sd["gate"], h, a)
        return h

    def set_mode(model, seeds, train):
        model.train(train)
        for sd in seeds:
            sd["mod"].train(train)
            if sd["gate"] is not None:
                sd["gate"].train(train)

    def validate(model, seeds, forced=None):
        loss = torch.zeros((), device=dev)
        correct = torch.zeros((), device=dev)
        alphas = None
        with infer():
            for xb, yb in val_batches:
                if forced is not None:
                    alphas = {forced: torch.zeros(xb.shape[0], 1, 1, 1, device=dev)}
                logits = forward(model, seeds, xb, alphas)
                loss += F.cross_entropy(logits, yb, reduction="sum")
                correct += (logits.argmax(1) == yb).sum()
        return loss.item() / args.val, 100.0 * correct.item() / args.val

    def fused(model, seeds, k):
        acc = {}
        attributed = [sd["spec"] for sd in seeds if sd["spec"]["alpha"] > 0]
        with infer():
            for xb, yb in val_batches:
                b = xb.shape[0]
                idx = torch.arange(k * b, device=dev) % b
                # Configuration c switches seed j on where bit j of c + 1
                # is set (the configurations other than all-on).
                alphas = {}
                for j, sp in enumerate(attributed):
                    on = torch.tensor([float(((c + 1) >> j) & 1) * sp["alpha"] for c in range(k)], device=dev)
                    alphas[sp["id"]] = on.repeat_interleave(b).reshape(k * b, 1, 1, 1)
                logits = forward(model, seeds, xb.index_select(0, idx), alphas)
                hit = (logits.argmax(1) == yb.index_select(0, idx)).float()
                if k * b not in acc:
                    acc[k * b] = torch.zeros(k * b, device=dev)
                acc[k * b] += hit
        return [a.tolist() for a in acc.values()]  # the one read per batch size

    def env_epoch(env, measured):
        i = work["i"]
        k = args.configs[i % len(args.configs)]
        abl = args.ablations[i % len(args.ablations)]
        specs = seed_trace[i % len(seed_trace)]
        work["i"] += 1
        model, opt = env["model"], env["opt"]
        seeds = sync_seeds(env, specs)
        t0 = clock()
        set_mode(model, seeds, True)
        perm = torch.randperm(args.train, generator=g).to(dev)
        loss_sum = torch.zeros((), device=dev)
        for b in range(n_train_batches):
            idx = perm[b * args.batch:(b + 1) * args.batch]
            xb, yb = train_x.index_select(0, idx), train_y.index_select(0, idx)
            opt.zero_grad(set_to_none=True)
            for sd in seeds:
                if sd["opt"] is not None:
                    sd["opt"].zero_grad(set_to_none=True)
            loss = F.cross_entropy(forward(model, seeds, xb), yb)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
            opt.step()
            for sd in seeds:
                if sd["opt"] is not None:
                    torch.nn.utils.clip_grad_norm_(sd["params"], MAX_GRAD_NORM)
                    sd["opt"].step()
            loss_sum += loss.detach()
        loss_sum.item()
        t1 = clock()
        set_mode(model, seeds, False)
        validate(model, seeds)
        t2 = clock()
        forced = [sd["spec"]["id"] for sd in seeds if sd["spec"]["alpha"] > 0] or [None]
        for a in range(abl):
            validate(model, seeds, forced[a % len(forced)])
        t3 = clock()
        if k > 0:
            fused(model, seeds, k)
        t4 = clock()
        if env["epoch"] % SNAPSHOT_EVERY == 0:
            {n: v.clone() for n, v in model.state_dict().items()}
        sync()  # the snapshot's copies are the epoch's last device work
        env["epoch"] += 1
        if env["epoch"] >= args.max_epochs:
            env["model"], env["opt"] = new_host()
            env["epoch"], env["seeds"] = 0, {}
            if measured:
                counts["episodes"] += 1
        if measured:
            counts["configs"] += k
            counts["ablations"] += abl
            counts["seeds"] += len(seeds)
            counts["seed_params"] += sum(sd["spec"]["params"] for sd in seeds)
            phase_ns["train"] += t1 - t0
            phase_ns["validation"] += t2 - t1
            phase_ns["ablation"] += t3 - t2
            phase_ns["fused"] += t4 - t3

    def act(measured):
        t0 = clock()
        with infer():
            logits, value = policy(graph)
            actions = [torch.multinomial(F.softmax(l, dim=1), 1, generator=gd) for l in logits]
        torch.cat(actions, dim=1).tolist()
        value.tolist()
        if measured:
            phase_ns["policy"] += clock() - t0

    def lockstep(measured):
        act(measured)
        for env in envs:
            env_epoch(env, measured)
        sync()

    for _ in range(args.warmup):
        lockstep(False)
    sync()
    # The work trace is of the measured env-epochs: replay it from its
    # start.
    work["i"] = 0
    lat_ns = []
    for _ in range(args.steps):
        t0 = clock()
        lockstep(True)
        lat_ns.append(clock() - t0)

    us = sorted(v / 1000.0 for v in lat_ns)
    total_s = sum(lat_ns) / 1e9
    env_epochs = args.steps * args.envs
    eps = env_epochs / total_s

    def pct(p):
        return us[min(max(1, int(math.ceil(p / 100.0 * len(us)))), len(us)) - 1]

    result = {
        "workload": "W4",
        "peer": "pytorch",
        "loop": "bare",
        "torch_version": torch.__version__,
        "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if cuda else "cpu",
        "threads": torch.get_num_threads(),
        "envs": args.envs,
        "blocks": args.blocks,
        "base_channels": args.base_channels,
        "train": args.train,
        "val": args.val,
        "batch": args.batch,
        "max_epochs": args.max_epochs,
        "steps": args.steps,
        "warmup": args.warmup,
        "host_params": host_params,
        "policy_params": policy_params,
        "env_epochs": env_epochs,
        "seconds": round(total_s, 6),
        "env_epochs_per_second": round(eps, 6),
        "env_epochs_per_second_per_env": round(eps / args.envs, 6),
        "latency": {"n": len(us), "p50_us": round(pct(50), 3), "p95_us": round(pct(95), 3),
                    "p99_us": round(pct(99), 3), "max_us": round(us[-1], 3),
                    "mean_us": round(sum(us) / len(us), 3)},
        "configs_total": counts["configs"],
        "ablations_total": counts["ablations"],
        "seeds_total": counts["seeds"],
        "seed_params_total": counts["seed_params"],
        "episodes": counts["episodes"],
        "phase_seconds": {k: round(v / 1e9, 6) for k, v in phase_ns.items()},
        "optimizer": "SGD lr=%g momentum=%g weight_decay=%g, clip_grad_norm %g" % (
            HOST_LR, HOST_MOMENTUM, HOST_WEIGHT_DECAY, MAX_GRAD_NORM),
        "eval_mode": infer.__name__,
        "data": "random-normal",
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    print("W4 pytorch %s on %s (%d threads): %d envs x %d lock-step steps after %d warm-up: %.2f env-epochs/s "
          "(%.2f per env); host %d params, policy %d params; %d fused configurations, %d ablation passes, "
          "%d seed-epochs" % (
              torch.__version__, dev, result["threads"], args.envs, args.steps, args.warmup, eps, eps / args.envs,
              host_params, policy_params, counts["configs"], counts["ablations"], counts["seeds"]))
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
