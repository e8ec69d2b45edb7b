"""First call of a family inside CUDA-graph capture: must work or raise clearly, never be lost."""

import json

import torch

import aotkernels as ak

x = torch.randn(1 << 16, device="cuda")
out = torch.empty_like(x)
g = torch.cuda.CUDAGraph()
outcome = "works"
try:
    with torch.cuda.graph(g):
        ak.sigmoid(x, out=out)
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize()
    if not torch.allclose(out, torch.sigmoid(x)):
        outcome = "WRONG"
except ak.AotKernelsError as e:
    outcome = f"error: {e}"
print(json.dumps({"outcome": outcome}))
