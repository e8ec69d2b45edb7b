"""Median ratio to the anchor per row and candidate in hot.py's pair_<tree>_<i>.json files.

Usage: python3 pair_summary.py <folder>; prints one line per row and candidate: each process's
ratio for main's install (base) and the candidate build (new), their medians and new / base.
"""

from __future__ import annotations

import glob
import json
import statistics
import sys
from collections import defaultdict


def main() -> None:
    folder = sys.argv[1]
    res: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(glob.glob(f"{folder}/pair_*.json")):
        tree = path.rsplit("pair_", 1)[1].split("_")[0]
        with open(path) as f:
            for row in json.load(f):
                for cand, ratio in row["ratio"].items():
                    res[(row["row"], cand)][tree].append(ratio)
    for (row, cand), trees in sorted(res.items()):
        line = f"{row:26s} {cand:11s}"
        for tree in ("base", "new"):
            vals = trees.get(tree, [])
            line += f" | {tree} " + " ".join(f"{v:.3f}" for v in vals)
            if vals:
                line += f" (med {statistics.median(vals):.3f})"
        if trees.get("base") and trees.get("new"):
            ratio = statistics.median(trees["new"]) / statistics.median(trees["base"])
            line += f" | new/base {ratio:.3f}"
        print(line)


if __name__ == "__main__":
    main()
