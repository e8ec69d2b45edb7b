"""One GEMM row, its tile forced, called 4 times (ncu profiles the 4th): ncu_one.py ROW TILE."""

from __future__ import annotations

import sys

import torch

sys.argv, row, tile = sys.argv[:1], sys.argv[1], sys.argv[2]
sys.argv.append("--rows=x")
import hot  # noqa: E402

dt, _, shape = row.partition(":")
m, n, k = (int(x) for x in shape.split("x"))
case = hot.cases(dt, m, n, k, "kk")
hot.force(tile)
for _ in range(4):
    case.ours(0)
torch.cuda.synchronize()
print("done", row, tile)
