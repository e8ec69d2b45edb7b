"""Run under CUDA_FORCE_PTX_JIT=1: the dispatcher must choose and load a PTX image, and the
result must be right. No torch here: torch's own kernels do not load under forced PTX JIT."""

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aotkernels as ak
from aotkernels import loader
from helpers.raw_buffers import device_copy, to_host, view

x = np.random.default_rng(0).standard_normal(10007).astype(np.float32)
src, dst = device_copy(x), device_copy(np.zeros_like(x))
ak.silu(view(src, x.shape), out=view(dst, x.shape))
y = to_host(dst, x.size)
ref = x / (1 + np.exp(-x.astype(np.float64)))
ok = bool(np.allclose(y, ref, rtol=1e-5, atol=1e-6))
fam = loader.family_on("activation", 0)
print(
    json.dumps(
        {
            "ok": ok,
            "target": fam.choice.target,
            "kind": fam.choice.image["kind"],
            "binary_version": fam.binary_version,
            "ptx_version": fam.ptx_version,
        }
    )
)
