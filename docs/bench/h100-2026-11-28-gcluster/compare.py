"""Per-row comparison of two ``aotkernels bench gemm --json`` files of one run.

python3 compare.py NEW.json BASE.json
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any


def key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["dtype"], r["shapes"], r["M"], r["N"], r["K"], r["b"], r["scales"])


def main() -> None:
    new = json.loads(Path(sys.argv[1]).read_text())["gemm"]
    base = {key(r): r for r in json.loads(Path(sys.argv[2]).read_text())["gemm"]}
    logs: dict[str, list[tuple[float, float, bool, bool]]] = {}
    print("dtype set M N K b scales new base anchor_new anchor_base ratio_new ratio_base new/base")
    for r in new:
        b = base.get(key(r))
        if b is None:
            continue
        print(
            f"{r['dtype']} {r['shapes']} {r['M']} {r['N']} {r['K']} {r['b']} {r['scales'] or '-'} "
            f"{r['ours_TFLOPS']:.1f} {b['ours_TFLOPS']:.1f} {r['anchor_TFLOPS']:.1f} "
            f"{b['anchor_TFLOPS']:.1f} {r['ratio']:.3f} {b['ratio']:.3f} "
            f"{r['ours_TFLOPS'] / b['ours_TFLOPS']:.3f}"
        )
        meets = (r["ratio"] >= r["goal"] - 1e-9, b["ratio"] >= b["goal"] - 1e-9)
        logs.setdefault(r["dtype"], []).append((math.log(r["ratio"]), math.log(b["ratio"]), *meets))
    for dt, v in logs.items():
        gn = math.exp(sum(x[0] for x in v) / len(v))
        gb = math.exp(sum(x[1] for x in v) / len(v))
        print(
            f"{dt}: geomean ours/anchor new {gn:.3f} base {gb:.3f}; rows meeting the goal new "
            f"{sum(x[2] for x in v)}/{len(v)} base {sum(x[3] for x in v)}/{len(v)}"
        )


if __name__ == "__main__":
    main()
