"""Session-13 recheck summary: per row, the ratio to the anchor (GEMM: hot.py's table; attention:
ours / cuDNN) in each of 3 fresh processes per tree, the trees alternated; median of each tree."""

import json
import statistics
import sys

W = sys.argv[1]


def rows(prefix: str, tree: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for i in (1, 2, 3):
        with open(f"{W}/{prefix}_{tree}_{i}.json") as f:
            for r in json.load(f):
                ratio = r["ratio"]["table"] if prefix == "g" else r["ratio"]
                out.setdefault(r["row"], []).append(ratio)
    return out


TITLES = (("g", "GEMM (hot.py, table, ratio to the anchor)"), ("a", "attention (ours / cuDNN)"))
HEAD = (
    "| row | base: 3 processes | merged: 3 processes | base median | merged median "
    "| merged / base |"
)
for prefix, title in TITLES:
    full, base = rows(prefix, "full"), rows(prefix, "base")
    print(f"\n{title}\n")
    print(HEAD)
    print("|---|---|---|---|---|---|")
    for row in full:
        bm, fm = statistics.median(base[row]), statistics.median(full[row])
        b = ", ".join(f"{x:.3f}" for x in base[row])
        f = ", ".join(f"{x:.3f}" for x in full[row])
        print(f"| {row} | {b} | {f} | {bm:.3f} | {fm:.3f} | {fm / bm:.3f} |")
