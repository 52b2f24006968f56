#!/usr/bin/python3
"""PERF.md W2 "tamiyo-gnn" workload, PyTorch peer (plain torch, CPU).

The inference forward of tamiyo.Policy written with index/scatter ops only
(no torch_geometric): per node type (global, slot, layer) an encoder
Linear -> GELU -> LayerNorm (slot features with a learned blueprint
embedding appended); two heterogeneous GraphSAGE layers (per relation
lin_l(mean of the sources over incoming edges) + lin_r(destination), the
relations into a node type averaged); two heterogeneous GAT layers (per
relation source/destination/edge projections, LeakyReLU(0.2) attention
logits normalised by a softmax over each node's incoming edges, heads
averaged, bias; a relation without edges gives its bias); after each layer
GELU and a residual where the widths match; the heads op, blueprint,
style, tempo, alpha_target, alpha_speed, alpha_curve (MLPs on [global, mean
slot embedding]), the slot pointer (an MLP score per slot node on [slot,
its global], padded to [B, max slots]) and the value (MLP on the global
embedding).  Evaluation mode, under torch.inference_mode.

The graphs and the widths come from `esper bench --workload W2 --compare
pytorch`, which writes them as JSON (--graphs-file): per batch size the
batched graph exactly as the Go side runs it.  Weights are PyTorch's
default initialisation (speed does not depend on them); the parameter
count is reported so that the caller can check that both sides built the
same network.

    OMP_NUM_THREADS=2 /usr/bin/python3 bench/pytorch/w2_gnn.py \
        --graphs-file /tmp/w2_graphs.json --batches 1,64 --reps 200,50 \
        --warmup 5 --threads 2 --json /tmp/w2_pytorch.json
"""

import argparse
import json
import os
import platform
import sys
import time

from peer_common import percentile, write_json  # noqa: E402

NODE_TYPES = ["global", "slot", "layer"]
# (name, src type, dst type) in tamiyo.Relation order.
RELATIONS = [
    ("global_influences_slot", 0, 1),
    ("slot_reports_global", 1, 0),
    ("global_operates_layer", 0, 2),
    ("layer_feedback_global", 2, 0),
    ("slot_next_slot", 1, 1),
    ("slot_prev_slot", 1, 1),
    ("slot_attached_layer", 1, 2),
    ("layer_hosts_slot", 2, 1),
    ("layer_next_layer", 2, 2),
    ("layer_prev_layer", 2, 2),
]
HEADS = ["slot", "blueprint", "style", "tempo", "alpha_target", "alpha_speed", "alpha_curve", "op"]


def parse_args(argv):
    ap = argparse.ArgumentParser(description="W2 tamiyo-gnn, PyTorch peer")
    ap.add_argument("--graphs-file", required=True, help="JSON written by esper bench (options and graphs)")
    ap.add_argument("--batches", default="1,64", help="batch sizes to time, comma-separated (default 1,64)")
    ap.add_argument("--reps", default="200,50", help="measured forwards per batch size, comma-separated")
    ap.add_argument("--warmup", type=int, default=5, help="unmeasured forwards per batch size (default 5)")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the weights (default 0)")
    ap.add_argument("--json", metavar="PATH", help="write the result as JSON to PATH")
    return ap.parse_args(argv)


def build(torch, opts):
    nn = torch.nn
    F = torch.nn.functional
    hid, gc, gh, hh = opts["hidden"], opts["gat_hidden"], opts["gat_heads"], opts["head_hidden"]
    widths, ef = opts["node_widths"], opts["edge_features"]

    class MLP(nn.Module):
        def __init__(self, i, o):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(i, hh), nn.Linear(hh, o)

        def forward(self, x):
            return self.fc2(F.relu(self.fc1(x)))

    class Encoder(nn.Module):
        def __init__(self, i):
            super().__init__()
            self.lin, self.norm = nn.Linear(i, hid), nn.LayerNorm(hid, eps=1e-5)

        def forward(self, x):
            return self.norm(F.gelu(self.lin(x)))

    class SAGERel(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin_l, self.lin_r = nn.Linear(hid, hid), nn.Linear(hid, hid, bias=False)

    class GATRel(nn.Module):
        def __init__(self, i):
            super().__init__()
            self.lin_src = nn.Linear(i, gh * gc, bias=False)
            self.lin_dst = nn.Linear(i, gh * gc, bias=False)
            self.lin_edge = nn.Linear(ef, gh * gc, bias=False)
            self.att_src = nn.Parameter(torch.randn(1, gh, gc) * 0.1)
            self.att_dst = nn.Parameter(torch.randn(1, gh, gc) * 0.1)
            self.att_edge = nn.Parameter(torch.randn(1, gh, gc) * 0.1)
            self.bias = nn.Parameter(torch.zeros(gc))

    def segment_mean(v, idx, n):
        tot = torch.zeros((n,) + tuple(v.shape[1:]), dtype=v.dtype).index_add_(0, idx, v)
        cnt = torch.zeros(n, dtype=v.dtype).index_add_(0, idx, torch.ones(idx.shape[0], dtype=v.dtype))
        return tot / cnt.clamp(min=1).reshape((n,) + (1,) * (v.dim() - 1))

    class Policy(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoders = nn.ModuleDict({
                "global": Encoder(widths[0]),
                "slot": Encoder(widths[1] + opts["blueprint_embedding"]),
                "layer": Encoder(widths[2]),
            })
            self.blueprint_embedding = nn.Embedding(opts["num_blueprints"], opts["blueprint_embedding"])
            self.sage = nn.ModuleList([nn.ModuleList([SAGERel() for _ in RELATIONS]) for _ in range(2)])
            self.gat = nn.ModuleList([nn.ModuleList([GATRel(i) for _ in RELATIONS]) for i in (hid, gc)])
            sizes = opts["head_sizes"]
            self.heads = nn.ModuleList([MLP(2 * gc, 1 if name == "slot" else sizes[k]) for k, name in enumerate(HEADS)])
            self.value = MLP(gc, 1)

        def sage_layer(self, rels, h, g):
            outs = [[] for _ in NODE_TYPES]
            for r, (_, s, d) in enumerate(RELATIONS):
                src, dst, _ = g["edges"][r]
                m = rels[r]
                root = m.lin_r(h[d])
                if src.shape[0] == 0:
                    outs[d].append(root + m.lin_l.bias)
                else:
                    outs[d].append(m.lin_l(segment_mean(h[s][src], dst, g["counts"][d])) + root)
            return [torch.stack(o).mean(0) for o in outs]

        def gat_layer(self, rels, h, g):
            outs = [[] for _ in NODE_TYPES]
            for r, (_, s, d) in enumerate(RELATIONS):
                src, dst, attr = g["edges"][r]
                m = rels[r]
                nd = g["counts"][d]
                if src.shape[0] == 0:
                    outs[d].append(m.bias.expand(nd, gc))
                    continue
                hs = m.lin_src(h[s]).view(-1, gh, gc)
                hd = m.lin_dst(h[d]).view(-1, gh, gc)
                he = m.lin_edge(attr).view(-1, gh, gc)
                logit = F.leaky_relu((hs * m.att_src).sum(-1)[src] + (hd * m.att_dst).sum(-1)[dst]
                                     + (he * m.att_edge).sum(-1), 0.2)
                idx = dst.unsqueeze(1).expand(-1, gh)
                mx = torch.full((nd, gh), -float("inf")).scatter_reduce(0, idx, logit, reduce="amax", include_self=True)
                ex = torch.exp(logit - mx[dst])
                den = torch.zeros((nd, gh)).index_add_(0, dst, ex)
                alpha = ex / den[dst]
                agg = torch.zeros((nd, gh, gc)).index_add_(0, dst, hs[src] * alpha.unsqueeze(-1))
                outs[d].append(agg.mean(1) + m.bias)
            return [torch.stack(o).mean(0) for o in outs]

        def forward(self, g):
            x = g["x"]
            slot_in = torch.cat([x[1], self.blueprint_embedding(g["bp"])], dim=1)
            h = [self.encoders["global"](x[0]), self.encoders["slot"](slot_in), self.encoders["layer"](x[2])]
            layers = [(self.sage_layer, self.sage[0]), (self.sage_layer, self.sage[1]),
                      (self.gat_layer, self.gat[0]), (self.gat_layer, self.gat[1])]
            for fn, rels in layers:
                out = fn(rels, h, g)
                nh = []
                for t in range(3):
                    y = F.gelu(out[t])
                    if y.shape == h[t].shape:
                        y = y + h[t]
                    nh.append(y)
                h = nh
            glob = h[0]
            ctx = torch.cat([glob, segment_mean(h[1], g["slot_graph"], g["b"])], dim=1)
            logits = []
            for k, name in enumerate(HEADS):
                if name == "slot":
                    scores = self.heads[k](torch.cat([h[1], glob[g["slot_graph"]]], dim=1)).reshape(-1)
                    padded = torch.cat([scores, scores.new_zeros(1)])[g["slot_pad"]]
                    logits.append(padded.reshape(g["b"], -1))
                else:
                    logits.append(self.heads[k](ctx))
            return logits, self.value(glob).reshape(-1)

    return Policy()


def graph_tensors(torch, gj, widths, ef):
    """A tamiyo.Graph (JSON) as the tensors the forward reads."""
    counts = [gj["Nodes"][t]["Count"] for t in range(3)]
    x = [torch.tensor(gj["Nodes"][t]["Features"], dtype=torch.float32).reshape(counts[t], widths[t]) for t in range(3)]
    edges = []
    for r in range(len(RELATIONS)):
        e = gj["Edges"][r]
        src = torch.tensor(e["Src"] or [], dtype=torch.long)
        dst = torch.tensor(e["Dst"] or [], dtype=torch.long)
        attr = torch.tensor(e["Attr"] or [], dtype=torch.float32).reshape(src.shape[0], ef)
        edges.append((src, dst, attr))
    b = gj["NumGraphs"]
    starts = gj["SlotStart"]
    max_slots = max(starts[i + 1] - starts[i] for i in range(b))
    pad = []
    for i in range(b):
        for k in range(max_slots):
            pad.append(starts[i] + k if starts[i] + k < starts[i + 1] else counts[1])
    return {
        "x": x, "edges": edges, "counts": counts, "b": b,
        "bp": torch.tensor(gj["SlotBlueprints"], dtype=torch.long),
        "slot_graph": torch.tensor(gj["Nodes"][1]["Graph"], dtype=torch.long),
        "slot_pad": torch.tensor(pad, dtype=torch.long),
    }


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Must be set before torch creates its OpenMP pool.
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    with open(args.graphs_file) as f:
        spec = json.load(f)
    opts = spec["options"]
    batches = [int(v) for v in args.batches.split(",")]
    reps = [int(v) for v in args.reps.split(",")]
    if len(reps) != len(batches):
        raise SystemExit("--reps needs one value per batch size")

    model = build(torch, opts).eval()
    params = sum(p.numel() for p in model.parameters())
    ctx = torch.inference_mode if hasattr(torch, "inference_mode") else torch.no_grad
    clock = time.perf_counter_ns
    result = {
        "workload": "W2", "peer": "pytorch", "torch_version": torch.__version__,
        "threads": torch.get_num_threads(), "params": params, "warmup": args.warmup,
        "eval_mode": ctx.__name__, "batches": {},
        "python": platform.python_version(), "machine": platform.machine(),
    }
    for b, n in zip(batches, reps):
        g = graph_tensors(torch, spec["graphs"][str(b)], opts["node_widths"], opts["edge_features"])
        with ctx():
            for _ in range(args.warmup):
                model(g)
            lat_ns = []
            for _ in range(n):
                t0 = clock()
                logits, value = model(g)
                lat_ns.append(clock() - t0)
        us = sorted(v / 1000.0 for v in lat_ns)
        mean = sum(us) / len(us)
        result["batches"][str(b)] = {
            "batch": b, "reps": n,
            "latency": {"n": n, "p50_us": round(percentile(us, 50), 3), "p95_us": round(percentile(us, 95), 3),
                        "p99_us": round(percentile(us, 99), 3), "max_us": round(us[-1], 3), "mean_us": round(mean, 3)},
            "graphs_per_second": b / (mean / 1e6),
            "logit_shapes": [list(l.shape) for l in logits] + [list(value.shape)],
        }
        print("W2 pytorch %s (%d threads): batch %d, %d forwards after %d warm-up: p50 %.1f us  p95 %.1f us" % (
            torch.__version__, result["threads"], b, n, args.warmup,
            result["batches"][str(b)]["latency"]["p50_us"], result["batches"][str(b)]["latency"]["p95_us"]))
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
