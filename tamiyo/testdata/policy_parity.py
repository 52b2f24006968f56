#!/usr/bin/env python3
"""Reference implementation of tamiyo.Policy in plain PyTorch (float64).

Reads policy_parity_input.json (graph, weights, loss weights; written by
`go test ./tamiyo -run TestPolicyParity -tamiyo.write-parity-input`) and
writes policy_parity_fixture.json: the network's outputs and the gradients
of sum(output * loss_weight) with respect to every parameter.

The network is written from the description in tamiyo/policy.go and
ESPER.md (Tamiyo), with scatter/index ops only (no torch_geometric):
per-type encoders Linear-GELU-LayerNorm; two GraphSAGE layers (per
relation lin_l(mean of sources) + lin_r(destination)); two GAT layers
(per relation, edge-attribute-aware attention, softmax over each node's
incoming edges, heads averaged, bias); relations averaged per destination
type; GELU, residual where shapes match; heads on [global, mean slot];
slot pointer on [slot, its global]; value on global.
"""
import json
import os

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
DT = torch.float64

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
WIDTHS = [23, 31, 6]
EDGE_FEATURES = 3
HEADS = ["slot", "blueprint", "style", "tempo", "alpha_target", "alpha_speed", "alpha_curve", "op"]


def f32(values, shape):
    """Values as the Go side holds them: rounded to float32, computed in float64."""
    return torch.tensor(values, dtype=torch.float32).reshape(shape).to(DT)


def main():
    with open(os.path.join(HERE, "policy_parity_input.json")) as f:
        inp = json.load(f)
    opts = inp["options"]
    heads, gat_c = opts["GATHeads"], opts["GATHidden"]
    g = inp["graph"]
    B = g["NumGraphs"]

    P = {}
    for p in inp["params"]:
        P[p["name"]] = f32(p["data"], p["shape"]).requires_grad_(True)

    def linear(x, prefix, bias=True):
        return F.linear(x, P[prefix + ".weight"], P[prefix + ".bias"] if bias else None)

    counts = [g["Nodes"][t]["Count"] for t in range(3)]
    x = [f32(g["Nodes"][t]["Features"], (counts[t], WIDTHS[t])) for t in range(3)]
    bp = torch.tensor(g["SlotBlueprints"], dtype=torch.long)
    slot_graph = torch.tensor(g["Nodes"][1]["Graph"], dtype=torch.long)
    edges = []
    for r, _ in enumerate(RELATIONS):
        e = g["Edges"][r]
        src = torch.tensor(e["Src"] or [], dtype=torch.long)
        dst = torch.tensor(e["Dst"] or [], dtype=torch.long)
        attr = f32(e["Attr"] or [], (len(src), EDGE_FEATURES))
        edges.append((src, dst, attr))

    # Encoders.
    h = []
    for t, name in enumerate(NODE_TYPES):
        xi = x[t]
        if name == "slot":
            xi = torch.cat([xi, P["blueprint_embedding.weight"][bp]], dim=1)
        pre = "encoders." + name
        y = F.gelu(linear(xi, pre + ".lin"))
        y = F.layer_norm(y, (y.shape[1],), P[pre + ".norm.weight"], P[pre + ".norm.bias"], eps=1e-5)
        h.append(y)

    def segment_mean(v, idx, n):
        tot = torch.zeros((n,) + tuple(v.shape[1:]), dtype=DT).index_add(0, idx, v)
        cnt = torch.zeros(n, dtype=DT).index_add(0, idx, torch.ones(len(idx), dtype=DT))
        return tot / cnt.clamp(min=1).reshape((n,) + (1,) * (v.dim() - 1))

    def sage(layer, h):
        outs = [[] for _ in NODE_TYPES]
        for r, (name, s, d) in enumerate(RELATIONS):
            src, dst, _ = edges[r]
            pre = f"{layer}.{name}"
            agg = segment_mean(h[s][src], dst, counts[d])
            outs[d].append(linear(agg, pre + ".lin_l") + linear(h[d], pre + ".lin_r", bias=False))
        return [torch.stack(o).mean(0) for o in outs]

    def gat(layer, h):
        outs = [[] for _ in NODE_TYPES]
        for r, (name, s, d) in enumerate(RELATIONS):
            src, dst, attr = edges[r]
            pre = f"{layer}.{name}"
            nd = counts[d]
            if len(src) == 0:
                outs[d].append(P[pre + ".bias"].expand(nd, gat_c))
                continue
            hs = linear(h[s], pre + ".lin_src", bias=False).view(-1, heads, gat_c)
            hd = linear(h[d], pre + ".lin_dst", bias=False).view(-1, heads, gat_c)
            he = linear(attr, pre + ".lin_edge", bias=False).view(-1, heads, gat_c)
            a_s = (hs * P[pre + ".att_src"]).sum(-1)
            a_d = (hd * P[pre + ".att_dst"]).sum(-1)
            a_e = (he * P[pre + ".att_edge"]).sum(-1)
            logit = F.leaky_relu(a_s[src] + a_d[dst] + a_e, 0.2)  # [E, H]
            idx = dst.unsqueeze(1).expand(-1, heads)
            mx = torch.full((nd, heads), -float("inf"), dtype=DT).scatter_reduce(
                0, idx, logit, reduce="amax", include_self=True)
            ex = torch.exp(logit - mx[dst])
            den = torch.zeros((nd, heads), dtype=DT).index_add(0, dst, ex)
            alpha = ex / den[dst]
            agg = torch.zeros((nd, heads, gat_c), dtype=DT).index_add(0, dst, hs[src] * alpha.unsqueeze(-1))
            outs[d].append(agg.mean(1) + P[pre + ".bias"])
        return [torch.stack(o).mean(0) for o in outs]

    for layer, fn in [("sage1", sage), ("sage2", sage), ("gat1", gat), ("gat2", gat)]:
        out = fn(layer, h)
        nh = []
        for t in range(3):
            y = F.gelu(out[t])
            if y.shape == h[t].shape:
                y = y + h[t]
            nh.append(y)
        h = nh

    def mlp(v, pre):
        return linear(F.relu(linear(v, pre + ".fc1")), pre + ".fc2")

    glob = h[0]
    ctx = torch.cat([glob, segment_mean(h[1], slot_graph, B)], dim=1)
    outputs = {}
    for name in HEADS:
        if name != "slot":
            outputs[name] = mlp(ctx, "head_" + name)
    outputs["slot_scores"] = mlp(torch.cat([h[1], glob[slot_graph]], dim=1), "head_slot").reshape(-1)
    outputs["value"] = mlp(glob, "value").reshape(-1)

    loss = 0
    for name, v in outputs.items():
        w = f32(inp["loss_weights"][name], v.shape)
        loss = loss + (v * w).sum()
    loss.backward()

    fixture = {
        "generator": "tamiyo/testdata/policy_parity.py, torch " + torch.__version__ + ", float64",
        "outputs": {k: v.detach().reshape(-1).tolist() for k, v in outputs.items()},
        "grads": {k: (v.grad if v.grad is not None else torch.zeros_like(v)).reshape(-1).tolist()
                  for k, v in P.items()},
    }
    with open(os.path.join(HERE, "policy_parity_fixture.json"), "w") as f:
        json.dump(fixture, f)


if __name__ == "__main__":
    main()
