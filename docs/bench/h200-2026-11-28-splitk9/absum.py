"""Summary of the ab.py processes: per row, each config's ratios (one per process) and medians."""

import glob
import json
import statistics
import sys

d = sys.argv[1]
runs: dict[str, list[list[dict]]] = {}
for f in sorted(glob.glob(f"{d}/ab_*.json")):
    cfg = f.split("ab_")[1].split("_")[0]
    with open(f) as fh:
        runs.setdefault(cfg, []).append(json.load(fh))
cfgs = sorted(runs)
base = runs[cfgs[0]][0]
print("row".ljust(34) + "".join(f"{c} ratios (per process)".ljust(44) for c in cfgs) + "medians")
for i, r in enumerate(base):
    name = f"{r['dtype']} {r['M']}x{r['N']}x{r['K']} {r['b']}"
    cols = []
    meds = []
    for c in cfgs:
        vals = [run[i]["ratio"] for run in runs[c]]
        cols.append(" ".join(f"{v:.3f}" for v in vals).ljust(44))
        meds.append(f"{c} {statistics.median(vals):.3f}")
    print(name.ljust(34) + "".join(cols) + ", ".join(meds))
