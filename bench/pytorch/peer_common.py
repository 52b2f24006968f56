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
