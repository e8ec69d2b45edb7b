"""ncu: cycles of forced wgmma tiles beside the anchor, one call each after warm-up."""

import sys

import torch

import aotkernels as ak
from aotkernels.bench import gemm as bg
from aotkernels.ops import _op, gemm

TILE0 = gemm._wgmma_tile
state = {}


def tile(*a, **kw):
    v = state.get("v")
    return TILE0(*a, **kw) if v is None else v


gemm._wgmma_tile = tile
cases = []
for spec in sys.argv[1].split(","):
    dt, shape, cands = spec.split(":")
    m, n, k = (int(x) for x in shape.split("x"))
    s = bg.GemmShape("llm", m, n, k)
    if dt == "bf16":
        c = bg._float_cases(torch, ak, "bf16", s)[0]
    else:
        c = bg._fp8_cases(torch, ak, s, ("tensor",), dt == "fp8fast")[0]
    for v in cands.split("+"):
        state["v"] = None if v == "table" else v
        _op._PLANS.clear()
        for _ in range(3):
            c.ours(0)
        cases.append((f"{spec}:{v}", c, state["v"]))
    for _ in range(3):
        c.anchor(0)
    cases.append((f"{spec}:anchor", c, "anchor"))
torch.cuda.synchronize()
torch.cuda.profiler.start()
for name, c, v in cases:
    torch.cuda.nvtx.range_push(name)
    if v == "anchor":
        c.anchor(0)
    else:
        state["v"] = v
        _op._PLANS.clear()
        c.ours(0)
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
