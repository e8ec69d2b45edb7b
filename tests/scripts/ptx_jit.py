"""Run under CUDA_FORCE_PTX_JIT=1: the dispatcher must choose and load a PTX image."""

import json

import torch

import aotkernels as ak
from aotkernels import loader

x = torch.randn(10000, device="cuda")
y = ak.silu(x)
ok = torch.allclose(y, torch.nn.functional.silu(x), rtol=2e-6, atol=1e-7)
fam = loader.family_on("activation", 0)
print(json.dumps({"ok": bool(ok), "target": fam.choice.target, "kind": fam.choice.image["kind"],
                  "binary_version": fam.binary_version, "ptx_version": fam.ptx_version}))
