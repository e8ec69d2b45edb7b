"""DRAM and L2 traffic of ours beside the anchor (one call each, after warm-up), under ncu."""

import sys

import torch

import aotkernels as ak
from aotkernels.bench import gemm as bg

ROWS = sys.argv[1].split(",")
cases = []
for spec in ROWS:
    dt, shape = spec.split(":")
    m, n, k = (int(x) for x in shape.split("x"))
    s = bg.GemmShape("llm", m, n, k)
    if dt == "bf16":
        c = bg._float_cases(torch, ak, "bf16", s)[0]
    elif dt == "fp8":
        c = bg._fp8_cases(torch, ak, s, ("tensor",), False)[0]
    else:
        c = bg._int8_cases(torch, ak, s)[0]
    for _ in range(3):
        c.ours(0)
        c.anchor(0)
    cases.append((spec, c))
torch.cuda.synchronize()
torch.cuda.profiler.start()
for spec, c in cases:
    torch.cuda.nvtx.range_push(spec + " ours")
    c.ours(0)
    torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_push(spec + " anchor")
    c.anchor(0)
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
