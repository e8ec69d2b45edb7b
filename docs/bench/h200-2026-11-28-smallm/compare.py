"""Per-row ratios of a round's ``bench gemm`` JSONs: this build (bench_new.json) beside base
(bench_base.json, main at 8448c81), both timed in the same call.

    python3 compare.py ROUND_FOLDER
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any


def key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["dtype"], r["M"], r["N"], r["K"], r["b"], r["scales"])


def geo(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs))


def main() -> None:
    folder = Path(sys.argv[1])
    new = json.loads((folder / "bench_new.json").read_text())["gemm"]
    base = {key(r): r for r in json.loads((folder / "bench_base.json").read_text())["gemm"]}
    pairs = [(r, base[key(r)]) for r in new if key(r) in base]
    print(f"{'row':38s} {'base':>6s} {'new':>6s}   new/base TFLOP/s  (* M <= 32)")
    for r, o in pairs:
        shape = f"{r['M']:5d}x{r['N']:5d}x{r['K']:5d}"
        speed = r["ours_TFLOPS"] / o["ours_TFLOPS"]
        mark = " *" if r["M"] <= 32 else ""
        print(f"{r['dtype']:4s} {shape} {r['b']:8s} {r['scales'] or '':6s} {o['ratio']:6.3f} "
              f"{r['ratio']:6.3f}   {speed:.3f}{mark}")  # fmt: skip
    for what, sel in (("all", pairs), ("M <= 32", [p for p in pairs if p[0]["M"] <= 32]),
                      ("M > 32", [p for p in pairs if p[0]["M"] > 32])):  # fmt: skip
        b, n = geo([o["ratio"] for _, o in sel]), geo([r["ratio"] for r, _ in sel])
        print(f"{what}: {len(sel)} rows, geomean ratio base {b:.3f}, new {n:.3f}")


if __name__ == "__main__":
    main()
