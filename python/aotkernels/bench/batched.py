"""``bench batched``: ak.matmul on [B, M, K] @ [B, K, N] beside torch.bmm (B 1 to 1000), and
ak.matmul(x, W.t(), bias=b) beside F.linear / torch.addmm (LLM layers, M 16..8192); each row
checked against the anchor's result first (``rel_err``), then timed as the GEMM rows."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .common import Row, versus
from .gemm import MAX_SETS
from .timing import cuda_torch, input_sets, rotate

TITLE = "batched matmul vs torch.bmm, bias matmul vs F.linear / addmm"
BMM_SHAPES = ((1, 4096, 4096, 4096), (1, 16, 4096, 4096), (8, 2048, 2048, 2048),
              (64, 512, 512, 512), (256, 1024, 1024, 128), (1000, 128, 128, 128),
              (1000, 64, 64, 64), (1000, 16, 64, 64))  # fmt: skip  # (batch, M, N, K)
BIAS_SHAPES = ((16, 4096, 4096), (1024, 4096, 4096), (8192, 4096, 4096), (1024, 14336, 4096))


def _row(
    kind: str, what: tuple[int, ...], flops: int, ours: Callable[[int], Any],
    anchor: Callable[[int], Any], anchor_name: str, reps: int,
) -> Row:  # fmt: skip
    rel, t_ours, t_anchor, notes = versus(ours, anchor, reps)
    return {
        "case": kind, "shape": "x".join(map(str, what)),
        "ours_TFLOPS": flops / t_ours / 1e9 if t_ours else None,
        "anchor_TFLOPS": flops / t_anchor / 1e9 if t_anchor else None,
        "ratio": t_anchor / t_ours if t_ours and t_anchor else None,
        "rel_err": rel, "ours_ms": t_ours, "anchor_ms": t_anchor, "anchor": anchor_name,
        "note": "; ".join(notes),
    }  # fmt: skip


def run(args: argparse.Namespace) -> list[Row]:
    torch = cuda_torch()
    import torch.nn.functional as F

    import aotkernels as ak

    dt = torch.bfloat16
    rows: list[Row] = []
    for bsz, m, n, k in BMM_SHAPES:
        sets = input_sets(bsz * (m + n) * k * 2, MAX_SETS)
        a = [torch.randn(bsz, m, k, device="cuda", dtype=dt) for _ in range(sets)]
        b = [torch.randn(bsz, k, n, device="cuda", dtype=dt) for _ in range(sets)]
        rows.append(_row("bmm", (bsz, m, n, k), 2 * bsz * m * n * k, rotate(ak.matmul, a, b),
                         rotate(torch.bmm, a, b), "torch.bmm", args.reps))  # fmt: skip
        a.clear()
        b.clear()
        torch.cuda.empty_cache()
    for m, n, k in BIAS_SHAPES:
        sets = input_sets((m + n) * k * 2, MAX_SETS)
        x = [torch.randn(m, k, device="cuda", dtype=dt) for _ in range(sets)]
        w = [torch.randn(n, k, device="cuda", dtype=dt) for _ in range(sets)]
        bias = [torch.randn(n, device="cuda", dtype=dt)]
        ours = rotate(lambda xi, wi, bi: ak.matmul(xi, wi.t(), bias=bi), x, w, bias)
        for name, anchor in (
            ("F.linear", rotate(F.linear, x, w, bias)),
            ("torch.addmm", rotate(lambda xi, wi, bi: torch.addmm(bi, xi, wi.t()), x, w, bias)),
        ):
            rows.append(_row("bias", (m, n, k), 2 * m * n * k, ours, anchor, name, args.reps))
        x.clear()
        w.clear()
        torch.cuda.empty_cache()
    return rows
