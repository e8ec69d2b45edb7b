"""The K-split cluster tiles forced, under compute-sanitizer: exact small-integer checks."""

from __future__ import annotations

import sys
from typing import Any

import torch

import aotkernels as ak
from aotkernels.ops import _op, gemm

TILE0 = gemm._wgmma_tile
tiles = ["wg_16x64tk2", "wg_32x64tk2"]
forced = [""]


def tile(m: int, n: int, batch: int, sms: int, block: bool, a_kmajor: bool = True) -> str:
    if batch == 1 and not block and a_kmajor:
        return forced[0]
    return TILE0(m, n, batch, sms, block, a_kmajor)


gemm._wgmma_tile = tile
g = torch.Generator(device="cuda").manual_seed(0)


def ints(*shape: int) -> Any:
    return torch.randint(-3, 4, shape, device="cuda", generator=g).float()


for t in tiles:
    forced[0] = t
    _op._PLANS.clear()
    for m, n, k in ((7, 4400, 200), (40, 130, 200), (1, 8, 64), (16, 300, 4000)):
        av, bv = ints(m, k), ints(k, n)
        ref = av.double() @ bv.double()
        for layout in ("kk", "kn"):
            a = av.to(torch.bfloat16)
            b = bv.to(torch.bfloat16)
            if layout == "kk":
                b = b.t().contiguous().t()
            y = ak.matmul(a, b, torch.float32)
            assert torch.equal(y.double(), ref), (t, m, n, k, layout)
        b8 = bv.t().contiguous().to(torch.float8_e4m3fn).t()
        for fast in (False, True):
            y = ak.scaled_mm(
                av.to(torch.float8_e4m3fn),
                b8,
                torch.ones(1, device="cuda"),
                torch.ones(1, device="cuda"),
                torch.float32,
                use_fast_accum=fast,
            )
            assert torch.equal(y.double(), ref), (t, m, n, k, "fp8", fast)
        bi = bv.t().contiguous().to(torch.int8).t()
        y = ak.scaled_mm(av.to(torch.int8), bi, out_dtype=torch.int32)
        assert torch.equal(y.double(), ref), (t, m, n, k, "int8")
        print(t, m, n, k, "ok", flush=True)
torch.cuda.synchronize()
print("SANITIZE_KSPLIT_OK")
sys.exit(0)
