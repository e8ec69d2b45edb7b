"""Medians of the alternated A/B drive processes (ab_<cfg>_<r>.json) and the bitwise check of
the dumped outputs: python3 absum.py RESDIR DUMPDIR"""

import glob
import json
import statistics
import sys

res, dumpdir = sys.argv[1], sys.argv[2]
runs: dict[str, dict[str, list[float]]] = {}
tf: dict[str, dict[str, list[float]]] = {}
for f in sorted(glob.glob(f"{res}/ab_*_*.json")):
    cfg = f.rsplit("/", 1)[1].split("_")[1]
    with open(f) as fh:
        rows = json.load(fh)
    for r in rows:
        for c, v in r["ratio"].items():
            key = r["row"] + ("" if c == "table" else f" [{c}]")
            runs.setdefault(key, {}).setdefault(cfg, []).append(v)
            tf.setdefault(key, {}).setdefault(cfg, []).append(r["TFLOPS"][c])
print(f"{'row':40s} {'base ratios':28s} {'new ratios':28s} base-med new-med new/base")
for key, d in runs.items():
    b, n = d.get("base", []), d.get("new", [])
    mb = statistics.median(b) if b else float("nan")
    mn = statistics.median(n) if n else float("nan")
    print(
        f"{key:40s} {' '.join(f'{x:.3f}' for x in b):28s} {' '.join(f'{x:.3f}' for x in n):28s} "
        f"{mb:.3f}    {mn:.3f}   {mn / mb:.3f}"
    )
try:
    import torch

    a = torch.load(f"{dumpdir}/out_base.pt")
    b = torch.load(f"{dumpdir}/out_new.pt")
    for row in a:
        if row in b:
            print(f"bitwise {row}: {'equal' if torch.equal(a[row], b[row]) else 'DIFFERENT'}")
except Exception as e:  # report, do not fail the phase
    print("bitwise check failed:", e)
