"""Kasmina's cnn seeds in plain torch, for the W4 peer (w4_env_loop.py).

The modules have the shapes and parameter counts of kasmina/blueprint's
cnn catalog (cnn.go, layers.go) and kasmina's GatedBlend (blend.go);
their initial values do not matter for speed and are torch's defaults.
slot_forward is kasmina.Slot.Forward's blend of a seed into the host's
activation.  Every function takes the torch module as its first argument
so that importing this file does not import torch.
"""


def num_groups(channels):
    """kasmina/blueprint NumGroups: the GroupNorm group count."""
    candidates = (32, 16, 8, 4, 2, 1)
    for g in candidates:
        if channels % g == 0 and channels // g >= 16:
            return g
    for g in candidates:
        if channels % g == 0:
            return g
    return 1


def build_seed(torch, blueprint, c):
    """A torch module computing blueprint's y = f(x) at c channels."""
    nn = torch.nn
    F = torch.nn.functional

    def conv(cin, cout, k, groups=1):
        return nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups, bias=False)

    def gn(ch):
        return nn.GroupNorm(num_groups(ch), ch)

    class Seed(nn.Module):
        def __init__(self):
            super().__init__()
            self.kind = blueprint
            if blueprint == "noop":
                pass
            elif blueprint == "norm":
                self.scale = nn.Parameter(torch.zeros(1))
                self.gn = gn(c)
            elif blueprint == "attention":
                hidden = max(1, c // 4)
                self.fc1, self.fc2 = nn.Linear(c, hidden), nn.Linear(hidden, c)
            elif blueprint == "depthwise":
                self.dw, self.pw, self.gn = conv(c, c, 3, groups=c), conv(c, c, 1), gn(c)
                self.out_scale = nn.Parameter(torch.ones(1, c, 1, 1))
            elif blueprint == "bottleneck":
                w = max(8, c // 4)
                self.down, self.conv, self.up, self.gn = conv(c, w, 1), conv(w, w, 3), conv(w, c, 1), gn(c)
            elif blueprint in ("conv_small", "conv_light"):
                self.conv, self.gn = conv(c, c, 1 if blueprint == "conv_small" else 3), gn(c)
                self.out_scale = nn.Parameter(torch.ones(1, c, 1, 1))
            elif blueprint == "conv_heavy":
                self.conv1, self.gn1, self.conv2, self.gn2 = conv(c, c, 3), gn(c), conv(c, c, 3), gn(c)
                self.out_scale = nn.Parameter(torch.ones(1, c, 1, 1))
            else:
                raise ValueError("unknown cnn blueprint %r" % blueprint)

        def forward(self, x):
            k = self.kind
            if k == "noop":
                return x
            if k == "norm":
                return x + torch.tanh(self.scale) * (self.gn(x) - x)
            if k == "attention":
                gate = torch.sigmoid(self.fc2(F.relu(self.fc1(x.mean((2, 3))))))
                return x * gate.reshape(x.shape[0], c, 1, 1)
            if k == "depthwise":
                return x + self.out_scale * F.relu(self.gn(self.pw(self.dw(x))))
            if k == "bottleneck":
                h = F.relu(self.conv(F.relu(self.down(x))))
                return x + self.gn(self.up(h))
            if k in ("conv_small", "conv_light"):
                return x + self.out_scale * F.relu(self.gn(self.conv(x)))
            h = F.relu(self.gn1(self.conv1(x)))
            return x + self.out_scale * F.relu(self.gn2(self.conv2(h)))

    return Seed()


def build_gate(torch, c):
    """kasmina.GatedBlend: GAP -> Linear(c, max(8, c/4)) -> ReLU ->
    Linear(., 1) -> sigmoid, as [B, 1, 1, 1]."""
    nn = torch.nn
    F = torch.nn.functional

    class Gate(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(c, max(8, c // 4)), nn.Linear(max(8, c // 4), 1)

        def forward(self, x):
            g = torch.sigmoid(self.fc2(F.relu(self.fc1(x.mean((2, 3))))))
            return g.reshape(x.shape[0], 1, 1, 1)

    return Gate()


def slot_forward(torch, spec, seed, gate, h, alpha=None):
    """kasmina.Slot.Forward: blends seed into the host activation h.
    alpha, when given, is a per-sample [B, 1, 1, 1] override (the fused
    validation's); else spec["alpha"] applies."""
    x = h.detach() if spec["isolate"] else h
    s = seed(x)
    if alpha is None and spec["training"] and spec["alpha"] == 0:
        return h + (s - s.detach())  # straight-through: the value is h
    a = alpha.clamp(0, 1) if alpha is not None else min(max(spec["alpha"], 0.0), 1.0)
    blend = spec["blend"]
    if blend == "multiply":
        return h * (1 + a * torch.tanh(s - x))
    if blend == "gate":
        eff = (a * gate(x).clamp(0, 1)).clamp(0, 1)
        return h + (s - h) * eff
    return h + a * (s - h)
