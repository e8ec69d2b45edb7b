"""Medians over processes of each row's ratio to the anchor (hot.py JSON), per tree."""

import glob
import json
import statistics
import sys

R = sys.argv[1]
out: dict[str, dict[str, list[float]]] = {}
for tree in ("base", "new"):
    for f in sorted(glob.glob(f"{R}/ab_{tree}_*.json")):
        with open(f) as fh:
            rows = json.load(fh)
        for r in rows:
            out.setdefault(r["row"], {}).setdefault(tree, []).append(r["ratio"]["table"])
head = f"{'row':26s} {'base (per process)':34s} {'new (per process)':34s}"
print(f"{head} base med  new med  new/base")
for row, d in out.items():
    b, n = d.get("base", []), d.get("new", [])
    mb, mn = statistics.median(b), statistics.median(n)
    per_b = " ".join(f"{x:.3f}" for x in b)
    per_n = " ".join(f"{x:.3f}" for x in n)
    print(f"{row:26s} {per_b:34s} {per_n:34s} {mb:.3f}    {mn:.3f}    {mn / mb:.3f}")
