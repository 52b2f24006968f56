#!/usr/bin/python3
"""Generate PyTorch reference fixtures for the esper Go tests.

Run with the system Python that has Debian's PyTorch 1.13:

    OMP_NUM_THREADS=2 /usr/bin/python3 bench/pytorch/make_fixtures.py [--out DIR]

Writes one .safetensors file per fixture into testdata/fixtures/ (relative to
the repository root) unless --out is given.  The output is deterministic:
running the script twice produces byte-identical files.  The exact contents
are documented in testdata/fixtures/README.md.
"""

import argparse
import copy
import json
import os
import struct
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

# scatter_reduce is flagged "beta" in 1.13 and warns on every call.
warnings.filterwarnings("ignore", message=".*scatter_reduce.*")

torch.set_default_dtype(torch.float32)
torch.use_deterministic_algorithms(True)

# ---------------------------------------------------------------------------
# safetensors writer (no dependency on the safetensors package)
# ---------------------------------------------------------------------------

_DTYPES = {
    torch.float32: ("F32", "<f4"),
    torch.float64: ("F64", "<f8"),
    torch.int64: ("I64", "<i8"),
    torch.int32: ("I32", "<i4"),
    torch.bool: ("BOOL", "|b1"),
}


def _tensor_bytes(t):
    t = t.detach().cpu().contiguous()
    code, npdt = _DTYPES[t.dtype]
    return code, t.numpy().astype(npdt, copy=False).tobytes(order="C")


def write_safetensors(path, tensors, metadata):
    """Write tensors (dict name -> torch.Tensor) and metadata (dict str -> str).

    Tensors are laid out in sorted key order; the JSON header is written with
    sorted keys and no whitespace, then padded with spaces to a multiple of 8.
    """
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        code, raw = _tensor_bytes(t)
        header[name] = {
            "dtype": code,
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("metadata must be str -> str: %r=%r" % (k, v))
        header["__metadata__"] = dict(sorted(metadata.items()))
    hjson = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
    return os.path.getsize(path)


class Fixture:
    def __init__(self, name):
        self.name = name
        self.t = {}
        self.meta = {}

    def add(self, name, tensor):
        if name in self.t:
            raise KeyError("duplicate tensor name %s in %s" % (name, self.name))
        if name == "__metadata__":
            raise KeyError("reserved name")
        self.t[name] = tensor.detach().clone()

    def add_state(self, prefix, module):
        """Add every state_dict entry except num_batches_tracked."""
        for k, v in module.state_dict().items():
            if k.endswith("num_batches_tracked"):
                continue
            self.add(prefix + k, v)

    def add_grads(self, prefix, module):
        for k, p in module.named_parameters():
            self.add(prefix + k, p.grad)

    def write(self, outdir):
        path = os.path.join(outdir, self.name + ".safetensors")
        size = write_safetensors(path, self.t, self.meta)
        dtypes = sorted({_DTYPES[v.dtype][0] for v in self.t.values()})
        print("%-28s %3d tensors  %7d bytes  dtypes=%s" %
              (self.name + ".safetensors", len(self.t), size, ",".join(dtypes)))
        return size


# ---------------------------------------------------------------------------
# Optimizer hyperparameters shared by the mlp and cnn fixtures
# ---------------------------------------------------------------------------

SGD_HP = dict(lr=0.1, momentum=0.9, weight_decay=5e-4, dampening=0.0, nesterov=False)
ADAMW_HP = dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, amsgrad=False)
N_STEPS = 3


def optim_meta(fx, with_nesterov):
    fx.meta.update({
        "sgd.lr": "0.1",
        "sgd.momentum": "0.9",
        "sgd.weight_decay": "0.0005",
        "sgd.dampening": "0",
        "sgd.nesterov": "false",
        "adamw.lr": "0.01",
        "adamw.betas": "0.9,0.999",
        "adamw.eps": "1e-8",
        "adamw.weight_decay": "0.01",
        "adamw.amsgrad": "false",
        "optim.steps": str(N_STEPS),
        "optim.procedure": "from the initial params; each step: zero_grad, forward on the same "
                           "input.x/input.target, cross_entropy mean, backward, step",
    })
    if with_nesterov:
        fx.meta.update({
            "sgdnesterov.lr": "0.1",
            "sgdnesterov.momentum": "0.9",
            "sgdnesterov.weight_decay": "0.0005",
            "sgdnesterov.dampening": "0",
            "sgdnesterov.nesterov": "true",
        })


def trajectory(fx, prefix, model0, make_opt, x, target):
    model = copy.deepcopy(model0)
    model.train()
    opt = make_opt(model.parameters())
    for k in range(1, N_STEPS + 1):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), target)
        loss.backward()
        opt.step()
        fx.add_state("%s.step%d." % (prefix, k), model)


def sgd(params):
    return torch.optim.SGD(params, **SGD_HP)


def sgd_nesterov(params):
    hp = dict(SGD_HP)
    hp["nesterov"] = True
    return torch.optim.SGD(params, **hp)


def adamw(params):
    return torch.optim.AdamW(params, **ADAMW_HP)


# ---------------------------------------------------------------------------
# a. mlp
# ---------------------------------------------------------------------------

def fixture_mlp():
    fx = Fixture("mlp")
    torch.manual_seed(1001)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(5, 8)
    target = torch.randint(0, 4, (5,), dtype=torch.int64)
    fx.add_state("param.", model)
    fx.add("input.x", x)
    fx.add("input.target", target)

    model0 = copy.deepcopy(model)
    xg = x.clone().requires_grad_(True)
    logits = model(xg)
    loss = F.cross_entropy(logits, target)
    loss.backward()
    fx.add("output.logits", logits)
    fx.add("output.loss", loss.reshape(()))
    fx.add_grads("grad.", model)
    fx.add("grad_input.x", xg.grad)

    trajectory(fx, "sgd", model0, sgd, x, target)
    trajectory(fx, "sgdnesterov", model0, sgd_nesterov, x, target)
    trajectory(fx, "adamw", model0, adamw, x, target)

    fx.meta["model"] = "nn.Sequential(Linear(8,16), ReLU(), Linear(16,4)); default PyTorch init, seed 1001"
    fx.meta["loss"] = "cross_entropy(logits, target), reduction mean, no label smoothing"
    optim_meta(fx, with_nesterov=True)
    return fx


# ---------------------------------------------------------------------------
# b. cnn
# ---------------------------------------------------------------------------

def fixture_cnn():
    fx = Fixture("cnn")
    torch.manual_seed(1002)
    model = nn.Sequential(
        # No conv bias: a bias feeding a train-mode BatchNorm has an exactly
        # zero gradient, and AdamW would amplify PyTorch's rounding noise in
        # it into an irreproducible trajectory (conv_variants covers biases).
        nn.Conv2d(1, 4, 3, padding=1, bias=False),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, 3),
    )
    x = torch.randn(6, 1, 8, 8)
    target = torch.randint(0, 3, (6,), dtype=torch.int64)
    model.train()
    fx.add_state("param.", model)
    fx.add("input.x", x)
    fx.add("input.target", target)

    model0 = copy.deepcopy(model)
    xg = x.clone().requires_grad_(True)
    logits = model(xg)
    loss = F.cross_entropy(logits, target)
    loss.backward()
    fx.add("output.logits", logits)
    fx.add("output.loss", loss.reshape(()))
    fx.add_grads("grad.", model)
    fx.add("grad_input.x", xg.grad)
    fx.add("after.fwd.1.running_mean", model[1].running_mean)
    fx.add("after.fwd.1.running_var", model[1].running_var)

    # Eval-mode forward: parameters still initial (no optimizer step taken),
    # running stats are the after-forward ones.
    model.eval()
    with torch.no_grad():
        fx.add("output.eval_logits", model(x))

    trajectory(fx, "sgd", model0, sgd, x, target)
    trajectory(fx, "adamw", model0, adamw, x, target)

    fx.meta["model"] = ("nn.Sequential(Conv2d(1,4,3,padding=1,bias=False), BatchNorm2d(4), ReLU(), MaxPool2d(2), "
                        "Flatten(), Linear(64,3)); default PyTorch init, seed 1002; train mode")
    fx.meta["bn.momentum"] = "0.1"
    fx.meta["bn.eps"] = "1e-05"
    fx.meta["loss"] = "cross_entropy(logits, target), reduction mean, no label smoothing"
    optim_meta(fx, with_nesterov=False)
    return fx


# ---------------------------------------------------------------------------
# c. conv_variants (F64)
# ---------------------------------------------------------------------------

CONV_CASES = [
    # name, cin, cout, kernel, stride, padding, dilation, groups
    ("basic", 3, 4, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    ("strided", 2, 3, (3, 3), (2, 2), (0, 0), (1, 1), 1),
    ("dilated", 2, 2, (3, 3), (1, 1), (2, 2), (2, 2), 1),
    ("grouped", 4, 6, (3, 3), (1, 1), (1, 1), (1, 1), 2),
    ("depthwise", 4, 4, (3, 3), (1, 1), (1, 1), (1, 1), 4),
    ("rect", 2, 3, (2, 3), (2, 1), (1, 0), (1, 1), 1),
]


def hw(p):
    return "%d,%d" % (p[0], p[1])


def fixture_conv_variants():
    fx = Fixture("conv_variants")
    f64 = torch.float64
    torch.manual_seed(1003)
    for name, cin, cout, k, s, p, d, g in CONV_CASES:
        x = torch.randn(2, cin, 7, 6, dtype=f64, requires_grad=True)
        w = (torch.randn(cout, cin // g, k[0], k[1], dtype=f64) * 0.5).requires_grad_(True)
        b = torch.randn(cout, dtype=f64, requires_grad=True)
        y = F.conv2d(x, w, b, stride=s, padding=p, dilation=d, groups=g)
        dy = torch.randn(y.shape, dtype=f64)
        (y * dy).sum().backward()
        fx.add(name + ".x", x)
        fx.add(name + ".weight", w)
        fx.add(name + ".bias", b)
        fx.add(name + ".y", y)
        fx.add(name + ".dy", dy)
        fx.add(name + ".grad_x", x.grad)
        fx.add(name + ".grad_weight", w.grad)
        fx.add(name + ".grad_bias", b.grad)
        fx.meta[name + ".kernel"] = hw(k)
        fx.meta[name + ".stride"] = hw(s)
        fx.meta[name + ".padding"] = hw(p)
        fx.meta[name + ".dilation"] = hw(d)
        fx.meta[name + ".groups"] = str(g)

    pools = [
        ("maxpool", "max", (2, 2), (2, 2), (0, 0)),
        ("avgpool", "avg", (3, 3), (2, 2), (1, 1)),
        ("maxpool3", "max", (3, 3), (2, 2), (1, 1)),
    ]
    for name, kind, k, s, p in pools:
        x = torch.randn(2, 3, 6, 6, dtype=f64, requires_grad=True)
        if kind == "max":
            y = F.max_pool2d(x, k, stride=s, padding=p)
        else:
            y = F.avg_pool2d(x, k, stride=s, padding=p, ceil_mode=False, count_include_pad=True)
        dy = torch.randn(y.shape, dtype=f64)
        (y * dy).sum().backward()
        fx.add(name + ".x", x)
        fx.add(name + ".y", y)
        fx.add(name + ".dy", dy)
        fx.add(name + ".grad_x", x.grad)
        fx.meta[name + ".kernel"] = hw(k)
        fx.meta[name + ".stride"] = hw(s)
        fx.meta[name + ".padding"] = hw(p)
        fx.meta[name + ".dilation"] = "1,1"
        fx.meta[name + ".ceil_mode"] = "false"
        if kind == "avg":
            fx.meta[name + ".count_include_pad"] = "true"
    fx.meta["loss"] = "(y * dy).sum() for every case; grads are d loss / d tensor"
    fx.meta["dtype"] = "F64"
    return fx


# ---------------------------------------------------------------------------
# d. layers (F32)
# ---------------------------------------------------------------------------

def _pointwise_x(n=50):
    x = torch.randn(n) * 3.0
    x[0] = -10.0
    x[1] = 10.0
    x[2] = 0.0
    x[3] = 25.0   # above the softplus threshold (20): softplus returns x
    x[4] = -25.0
    return x


def fixture_layers():
    fx = Fixture("layers")
    torch.manual_seed(1004)

    def run(name, x, params, fn, grad_x=True):
        """params: list of (pname, tensor). fn(x, *params) -> y."""
        ps = [t.clone().requires_grad_(True) for _, t in params]
        xin = x.clone().requires_grad_(True) if grad_x else x
        y = fn(xin, *ps)
        dy = torch.randn(y.shape, dtype=y.dtype)
        (y * dy).sum().backward()
        fx.add(name + ".x", x)
        for (pname, t), pt in zip(params, ps):
            fx.add(name + "." + pname, t)
            fx.add(name + ".grad_" + pname, pt.grad)
        fx.add(name + ".y", y)
        fx.add(name + ".dy", dy)
        if grad_x:
            fx.add(name + ".grad_x", xin.grad)

    # LayerNorm(10), eps 1e-5, elementwise affine with random weight/bias.
    x = torch.randn(4, 3, 10)
    w = 1.0 + 0.5 * torch.randn(10)
    b = 0.5 * torch.randn(10)
    run("layernorm", x, [("weight", w), ("bias", b)],
        lambda x, w, b: F.layer_norm(x, (10,), w, b, eps=1e-5))
    fx.meta["layernorm.normalized_shape"] = "10"
    fx.meta["layernorm.eps"] = "1e-05"

    # GroupNorm(2 groups, 6 channels), eps 1e-5.
    x = torch.randn(3, 6, 4, 4) * 2.0 + 0.5
    w = 1.0 + 0.5 * torch.randn(6)
    b = 0.5 * torch.randn(6)
    run("groupnorm", x, [("weight", w), ("bias", b)],
        lambda x, w, b: F.group_norm(x, 2, w, b, eps=1e-5))
    fx.meta["groupnorm.num_groups"] = "2"
    fx.meta["groupnorm.num_channels"] = "6"
    fx.meta["groupnorm.eps"] = "1e-05"

    # Embedding(11, 5) with repeated indices.
    idx = torch.tensor([[1, 3, 3, 0], [10, 3, 7, 1], [5, 5, 5, 2]], dtype=torch.int64)
    w = torch.randn(11, 5)
    run("embedding", idx, [("weight", w)], lambda i, w: F.embedding(i, w), grad_x=False)
    fx.meta["embedding.num_embeddings"] = "11"
    fx.meta["embedding.embedding_dim"] = "5"
    fx.meta["embedding.padding_idx"] = "none"

    run("gelu_tanh", _pointwise_x(), [], lambda x: F.gelu(x, approximate="tanh"))
    run("gelu_erf", _pointwise_x(), [], lambda x: F.gelu(x, approximate="none"))
    run("silu", _pointwise_x(), [], F.silu)
    run("sigmoid", _pointwise_x(), [], torch.sigmoid)
    run("tanh", _pointwise_x(), [], torch.tanh)
    run("softplus", _pointwise_x(), [], lambda x: F.softplus(x, beta=1.0, threshold=20.0))
    fx.meta["softplus.beta"] = "1"
    fx.meta["softplus.threshold"] = "20"

    # BatchNorm2d(3), train mode, momentum 0.1, eps 1e-5.
    bn = nn.BatchNorm2d(3, eps=1e-5, momentum=0.1)
    with torch.no_grad():
        bn.weight.copy_(1.0 + 0.5 * torch.randn(3))
        bn.bias.copy_(0.5 * torch.randn(3))
    bn.train()
    x = torch.randn(4, 3, 5, 5) * 1.5 + 0.3
    fx.add("batchnorm.x", x)
    fx.add("batchnorm.weight", bn.weight)
    fx.add("batchnorm.bias", bn.bias)
    fx.add("batchnorm.running_mean", bn.running_mean)
    fx.add("batchnorm.running_var", bn.running_var)
    xg = x.clone().requires_grad_(True)
    y = bn(xg)
    dy = torch.randn(y.shape)
    (y * dy).sum().backward()
    fx.add("batchnorm.y", y)
    fx.add("batchnorm.dy", dy)
    fx.add("batchnorm.grad_x", xg.grad)
    fx.add("batchnorm.grad_weight", bn.weight.grad)
    fx.add("batchnorm.grad_bias", bn.bias.grad)
    fx.add("batchnorm.running_mean_after", bn.running_mean)
    fx.add("batchnorm.running_var_after", bn.running_var)
    fx.meta["batchnorm.num_features"] = "3"
    fx.meta["batchnorm.momentum"] = "0.1"
    fx.meta["batchnorm.eps"] = "1e-05"
    fx.meta["batchnorm.mode"] = "train"

    fx.meta["loss"] = "(y * dy).sum() for every layer; grads are d loss / d tensor"
    fx.meta["dtype"] = "F32 (embedding.x is I64)"
    return fx


# ---------------------------------------------------------------------------
# e. loss (F32)
# ---------------------------------------------------------------------------

def fixture_loss():
    fx = Fixture("loss")
    torch.manual_seed(1005)
    logits = torch.randn(7, 5) * 2.0
    target = torch.randint(0, 5, (7,), dtype=torch.int64)
    fx.add("input.logits", logits)
    fx.add("input.target", target)

    for name, red, ls in [("ce_mean", "mean", 0.1), ("ce_sum", "sum", 0.1),
                          ("ce_none", "none", 0.1), ("ce_plain", "mean", 0.0)]:
        lg = logits.clone().requires_grad_(True)
        loss = F.cross_entropy(lg, target, reduction=red, label_smoothing=ls)
        if red == "none":
            dy = torch.randn(loss.shape)
            (loss * dy).sum().backward()
            fx.add(name + ".dy", dy)
        else:
            loss.backward()
            loss = loss.reshape(())
        fx.add(name + ".loss", loss)
        fx.add(name + ".grad_logits", lg.grad)
        fx.meta[name + ".reduction"] = red
        fx.meta[name + ".label_smoothing"] = repr(ls)

    def rowwise(name, fn):
        x = torch.randn(7, 5) * 2.0
        x[3] += 100.0  # large row: needs max-subtraction for stability in F32
        xg = x.clone().requires_grad_(True)
        y = fn(xg)
        dy = torch.randn(y.shape)
        (y * dy).sum().backward()
        fx.add(name + ".x", x)
        fx.add(name + ".y", y)
        fx.add(name + ".dy", dy)
        fx.add(name + ".grad_x", xg.grad)
        fx.meta[name + ".dim"] = "1"

    rowwise("softmax", lambda x: F.softmax(x, dim=1))
    rowwise("logsoftmax", lambda x: F.log_softmax(x, dim=1))
    rowwise("logsumexp", lambda x: torch.logsumexp(x, dim=1))
    fx.meta["dtype"] = "F32 (input.target is I64)"
    return fx


# ---------------------------------------------------------------------------
# f. scatter (F64)
# ---------------------------------------------------------------------------

NUM_SEGMENTS = 4


def fixture_scatter():
    fx = Fixture("scatter")
    f64 = torch.float64
    torch.manual_seed(1006)
    src = torch.randn(9, 4, dtype=f64)
    # Unsorted segment ids in [0,4); segment 3 is deliberately empty.
    index = torch.tensor([2, 0, 1, 0, 2, 2, 1, 0, 2], dtype=torch.int64)
    assert not (index == 3).any()
    fx.add("input.src", src)
    fx.add("input.index", index)
    S = NUM_SEGMENTS
    idx2 = index.view(-1, 1).expand(-1, src.shape[1])

    def run(name, fn):
        s = src.clone().requires_grad_(True)
        y = fn(s)
        dy = torch.randn(y.shape, dtype=f64)
        (y * dy).sum().backward()
        fx.add(name + ".y", y)
        fx.add(name + ".dy", dy)
        fx.add(name + ".grad_src", s.grad)

    run("scatter_add", lambda s: torch.zeros(S, 4, dtype=f64).index_add(0, index, s))
    run("segment_sum", lambda s: torch.zeros(S, 4, dtype=f64).index_add(0, index, s))

    counts = torch.bincount(index, minlength=S).to(f64)

    def seg_mean(s):
        tot = torch.zeros(S, 4, dtype=f64).index_add(0, index, s)
        return tot / counts.clamp(min=1.0).view(-1, 1)

    run("segment_mean", seg_mean)

    def seg_max(s):
        return torch.zeros(S, 4, dtype=f64).scatter_reduce(0, idx2, s, "amax", include_self=False)

    run("segment_max", seg_max)

    def seg_softmax(s):
        mx = torch.zeros(S, 4, dtype=f64).scatter_reduce(
            0, idx2, s.detach(), "amax", include_self=False)
        e = torch.exp(s - mx[index])
        den = torch.zeros(S, 4, dtype=f64).index_add(0, index, e)
        return e / den[index]

    run("segment_softmax", seg_softmax)

    gidx = torch.tensor([[0, 3], [1, 1], [2, 0], [3, 3], [0, 0],
                         [2, 1], [1, 3], [0, 2], [3, 2]], dtype=torch.int64)
    fx.add("gather.index", gidx)
    run("gather", lambda s: torch.gather(s, 1, gidx))

    sidx = torch.tensor([4, 0, 8, 4, 2, 4], dtype=torch.int64)
    fx.add("index_select.index", sidx)
    run("index_select", lambda s: torch.index_select(s, 0, sidx))

    fx.meta["num_segments"] = str(S)
    fx.meta["empty_segments"] = "3"
    fx.meta["dtype"] = "F64 (indices I64)"
    fx.meta["segment_max.note"] = ("zeros(4,4).scatter_reduce(0, index, src, 'amax', include_self=False): "
                                   "empty segment -> 0; non-empty -> true max (may be negative); "
                                   "gradient flows to the arg-max row of each (segment, column)")
    fx.meta["segment_mean.note"] = "sum / max(count, 1): empty segment -> 0"
    fx.meta["gather.dim"] = "1"
    fx.meta["index_select.dim"] = "0"
    return fx


# ---------------------------------------------------------------------------

def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(repo, "testdata", "fixtures"),
                    help="output directory (default: <repo>/testdata/fixtures)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    # One intra-op thread: the reduction order (and so the last bits of F32
    # results) then does not depend on OMP_NUM_THREADS.
    torch.set_num_threads(1)

    total = 0
    for make in (fixture_mlp, fixture_cnn, fixture_conv_variants,
                 fixture_layers, fixture_loss, fixture_scatter):
        fx = make()
        fx.meta["generator"] = "bench/pytorch/make_fixtures.py"
        fx.meta["torch_version"] = torch.__version__
        total += fx.write(args.out)
    print("total %d bytes in %s" % (total, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
