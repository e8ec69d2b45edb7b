"""Side by side: the bench gemm rows of this build ("new") and of main ("base") from one
round folder (bench_new.json / bench_base.json), on the rows this work is about (M = 128, the
few-tile squares, M = 1024 with N x K = 4096 x 4096 and 14336 x 4096).

python3 compare.py round2
"""

import json
import math
import sys
from typing import Any


def load(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return list(json.load(f)["gemm"])


folder = sys.argv[1]
new = load(f"{folder}/bench_new.json")
base = load(f"{folder}/bench_base.json")


def key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["dtype"], r["M"], r["N"], r["K"], r["b"], r["scales"])


def mine(r: dict[str, Any]) -> bool:
    square = r["M"] == r["N"] == r["K"] and r["M"] <= 2048
    m1024 = r["M"] == 1024 and (r["N"], r["K"]) in ((14336, 4096), (4096, 4096))
    return r["M"] == 128 or square or m1024


old = {key(r): r for r in base}
print("| dtype | M x N x K | b | scales | base/anchor | new/anchor | new/base |")
print("|---|---|---|---|---|---|---|")
pairs = []
for r in new:
    if not mine(r) or key(r) not in old:
        continue
    o = old[key(r)]
    pairs.append((r["ratio"], o["ratio"]))
    nb = r["ours_TFLOPS"] / o["ours_TFLOPS"]
    print(
        f"| {r['dtype']} | {r['M']}x{r['N']}x{r['K']} | {r['b']} | {r['scales'] or ''} | "
        f"{o['ratio']:.3f} | {r['ratio']:.3f} | {nb:.3f} |"
    )


def geo(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


print(
    f"\n{len(pairs)} rows, geomean vs anchor: base {geo([o for _, o in pairs]):.3f}, "
    f"new {geo([n for n, _ in pairs]):.3f}"
)
