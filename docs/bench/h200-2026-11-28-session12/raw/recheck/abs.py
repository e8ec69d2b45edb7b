"""Medians over processes of each row's ratio to the anchor (hot.py JSON), per tree."""
import glob, json, statistics, sys
R = sys.argv[1]
out = {}
for tree in ("base", "new"):
    for f in sorted(glob.glob(f"{R}/ab_{tree}_*.json")):
        for r in json.load(open(f)):
            out.setdefault(r["row"], {}).setdefault(tree, []).append(r["ratio"]["table"])
print(f"{'row':26s} {'base (per process)':34s} {'new (per process)':34s} base med  new med  new/base")
for row, d in out.items():
    b, n = d.get("base", []), d.get("new", [])
    mb, mn = statistics.median(b), statistics.median(n)
    print(f"{row:26s} {' '.join(f'{x:.3f}' for x in b):34s} {' '.join(f'{x:.3f}' for x in n):34s} {mb:.3f}    {mn:.3f}    {mn / mb:.3f}")
