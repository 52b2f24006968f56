#!/usr/bin/env python3
"""ncu_top.py [--by-grid] CSV [CSV ...]: the kernels that took the most GPU
time in an Nsight Compute CSV (ncu --csv --metrics gpu__time_duration.sum),
summed by kernel name: total, share, launches and mean per launch. With
--by-grid, summed by kernel name and grid size instead, which separates
one kernel's launches by problem size (W2's batch 1 from its batch 64).
gpu/run.sh's profile phase writes both tables per workload with it.

ncu replays each kernel alone (gpu/run.sh leaves caches warm and clocks
unlocked), so its times are not exactly those of a graph replay: read the
shares and the ranks first. A CSV may be gzipped (.gz)."""
import collections
import csv
import gzip
import io
import sys


def rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", errors="replace") as f:
        # ncu prints its own "==PROF==" lines and the program's output
        # among the CSV rows, which are the quoted lines.
        lines = [l for l in f if l.startswith('"')]
    return list(csv.DictReader(io.StringIO("".join(lines))))


def main(paths, top=25):
    by_grid = bool(paths) and paths[0] == "--by-grid"
    if by_grid:
        paths = paths[1:]
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for path in paths:
        rs = [r for r in rows(path) if r.get("Metric Name") == "gpu__time_duration.sum"]
        agg = collections.defaultdict(lambda: [0, 0.0])
        for r in rs:
            try:
                t = float(r["Metric Value"].replace(",", ""))
            except (KeyError, ValueError):
                continue
            scale = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(r.get("Metric Unit", "ns"), 1e-3)
            key = r["Kernel Name"][:90]
            if by_grid:
                key = f'{r["Kernel Name"][:70]} grid {r.get("Grid Size", "?")}'
            a = agg[key]
            a[0] += 1
            a[1] += t * scale
        total = sum(v[1] for v in agg.values())
        print(f"{path}: {len(rs)} kernels, {total:.1f} µs in all (ncu's replay: shares, not times)")
        if not total:
            continue
        print(f"{'µs':>10} {'share':>6} {'launches':>8} {'µs each':>8}  kernel")
        for name, (n, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]:
            print(f"{t:10.1f} {100 * t / total:5.1f}% {n:8d} {t / n:8.2f}  {name}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
