"""Helpers shared by the PyTorch peer scripts of `esper bench --compare
pytorch` (importable because each script's directory is on sys.path)."""

import json
import math
import os


def percentile(sorted_vals, p):
    """Nearest-rank percentile of an ascending list."""
    n = len(sorted_vals)
    k = max(1, int(math.ceil(p / 100.0 * n)))
    return sorted_vals[min(k, n) - 1]


def write_json(path, result):
    """Writes result as indented JSON to path, creating its directory."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")


def peer_device(torch, script, name):
    """The torch device a peer runs on (--device): cpu or cuda[:N], the
    latter only where PyTorch sees a CUDA device. Returns (device, is_cuda)
    or exits naming the script."""
    dev = torch.device(name)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("%s: no CUDA device (--device cpu runs the CPU peer)" % script)
    if not cuda and dev.type != "cpu":
        raise SystemExit("%s: --device must be cpu or cuda[:N]" % script)
    return dev, cuda
