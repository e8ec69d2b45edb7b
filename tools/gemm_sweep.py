"""Sweep the sm_90a GEMM tile table: every wgmma variant and split-K count forced per shape.

The data behind the tile table in python/aotkernels/ops/gemm.py. Each shape runs once per
(variant, splits) candidate with the op's choice replaced by that candidate, then once as the
table picks it, beside the anchor (torch.matmul / torch._scaled_mm). Prints one line per shape and
writes the TFLOP/s as JSON.

    python3 tools/gemm_sweep.py [--dtypes bf16,fp8,fp8fast,fp8rowcol,fp8block,int8]
                                [--set small|all]
                                [--shapes MxNxK,...] [--variants V,...] [--splits S,...]
                                [--layouts kk,kn] [--json out.json]

``--shapes`` replaces the set's shapes, ``--variants`` / ``--splits`` the candidates (int8 and
the fp8 row/column and block scales never split). ``--layouts``: b K-major (kk) and / or
row-major (kn) for 16-bit operands (8-bit ones run kk only). fp8fast: fp8 per-tensor scales
with ``use_fast_accum=True`` on both sides.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

SMALL_M = (16, 128)
LLM_NK = ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192))
SPLITS = (1, 2, 3, 4, 6, 8)
VARIANTS = (
    "wg_64x64", "wg_64x128", "wg_128x64", "wg_128x128", "wg_128x256", "wg_128x256c2",
)  # fmt: skip
# fp8 with per-row/column or block scales: the large shapes their epilogue / main loop decide.
LARGE = ((1024, 4096, 4096), (1024, 8192, 8192), (4096, 4096, 4096), (8192, 8192, 8192))


def shapes(dtype: str, which: str) -> list[tuple[int, int, int]]:
    """(M, N, K) of one sweep dtype: few-tile shapes (small M, small squares) for plain bf16 /
    fp8, large ones for fp8 with row/column or block scales; ``all`` adds the M = 1024 layers."""
    if dtype in ("fp8rowcol", "fp8block"):
        return [(128, 4096, 4096), *LARGE] if dtype == "fp8block" else list(LARGE)
    out = [(m, n, k) for m in SMALL_M for n, k in LLM_NK] + [(1024,) * 3, (2048,) * 3]
    if which == "all":
        out += [(1024, n, k) for n, k in LLM_NK] + [(4096,) * 3]
    return out


def candidates(
    m: int, n: int, variants: tuple[str, ...] = VARIANTS, splits: tuple[int, ...] | None = None
) -> list[tuple[str, int]]:
    """(variant, splits) to force: every split count for M <= 128, 2 splits for few tiles."""
    if splits is None:
        splits = SPLITS if m <= 128 else (1, 2) if m * n <= 2048 * 2048 else (1,)
    return [(v, s) for v in variants for s in splits]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bf16,fp8")
    ap.add_argument("--set", default="small", choices=("small", "all"))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json", default=None)
    ap.add_argument("--shapes", default=None, help="MxNxK,... instead of the set's shapes")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--splits", default=None, help="split counts to force (default: by shape)")
    ap.add_argument("--layouts", default="kk", help="kk (b K-major), kn (b row-major): 16-bit")
    args = ap.parse_args()
    variants = tuple(args.variants.split(","))
    splits = tuple(int(x) for x in args.splits.split(",")) if args.splits else None
    given = None
    if args.shapes:
        given = [tuple(int(x) for x in sh.split("x")) for sh in args.shapes.split(",")]

    import torch

    import aotkernels as ak
    from aotkernels.bench.gemm import GemmShape, _fp8_scales
    from aotkernels.bench.timing import input_sets, median_ms, rotate
    from aotkernels.ops import _op, gemm

    pick0, split0 = gemm._pick, gemm._split_k
    forced: dict[str, Any] = {}

    def pick(op: str, dtype: str, m: int, n: int, k: int, layout: str, *a: Any, **kw: Any) -> Any:
        got = pick0(op, dtype, m, n, k, layout, *a, **kw)
        if "variant" not in forced or got.path != "wgmma":
            return got
        v = forced["variant"]
        return gemm._Pick(f"ak_{op}_{dtype}_{v}_{layout}", v, "wgmma")

    def split_k(
        dtype: str, m: int, n: int, k: int, batch: tuple[int, ...], swapped: bool = False
    ) -> Any:
        s = forced.get("splits")
        if s is None:
            return split0(dtype, m, n, k, batch, swapped)
        blocks = math.ceil(k / 128)
        per = math.ceil(blocks / s)
        if s <= 1 or per >= blocks:
            return gemm._Split(1, 0)
        return gemm._Split(math.ceil(blocks / per), per * 128)

    gemm._pick, gemm._split_k = pick, split_k

    def force(variant: str | None, splits: int | None) -> None:
        forced.clear()
        if variant is not None:
            forced.update(variant=variant, splits=splits)
        _op._PLANS.clear()

    results = []
    todo = [
        (dt, shape, lay)
        for dt in args.dtypes.split(",")
        for shape in given or shapes(dt, args.set)
        for lay in args.layouts.split(",")
        if lay == "kk" or dt in ("bf16", "f16")
    ]
    for dt, (m, n, k), lay in todo:
        item = 2 if dt in ("bf16", "f16") else 1
        sets = input_sets((m + n) * k * item, 64)
        if dt in ("bf16", "f16"):
            tdt = getattr(torch, {"bf16": "bfloat16", "f16": "float16"}[dt])
            a = [torch.randn(m, k, device="cuda", dtype=tdt) for _ in range(sets)]
            if lay == "kk":
                b = [torch.randn(n, k, device="cuda", dtype=tdt).t() for _ in range(sets)]
            else:
                b = [torch.randn(k, n, device="cuda", dtype=tdt) for _ in range(sets)]
            ours = rotate(ak.matmul, a, b)
            anchor = rotate(torch.matmul, a, b)
        elif dt == "int8":
            a = [torch.randint(-8, 8, (m, k), device="cuda", dtype=torch.int8)
                 for _ in range(sets)]  # fmt: skip
            b = [torch.randint(-8, 8, (n, k), device="cuda", dtype=torch.int8).t()
                 for _ in range(sets)]  # fmt: skip

            def ours_int8(x: Any, y: Any) -> Any:
                return ak.scaled_mm(x, y, out_dtype=torch.int32)

            ours = rotate(ours_int8, a, b)
            anchor = rotate(torch._int_mm, a, b)
        else:
            f8 = torch.float8_e4m3fn
            a = [torch.randn(m, k, device="cuda").to(f8) for _ in range(sets)]
            b = [torch.randn(n, k, device="cuda").to(f8).t() for _ in range(sets)]
            mode = {"fp8rowcol": "rowcol", "fp8block": "block"}.get(dt, "tensor")
            sa, sb, tsa, tsb = _fp8_scales(torch, mode, GemmShape("llm", m, n, k))
            fast = dt == "fp8fast"

            def ours_fn(x: Any, y: Any, sa: Any = sa, sb: Any = sb, fast: bool = fast) -> Any:
                return ak.scaled_mm(x, y, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)

            def anchor_fn(x: Any, y: Any, sa: Any = tsa, sb: Any = tsb, fast: bool = fast) -> Any:
                return torch._scaled_mm(
                    x, y, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=fast
                )

            ours = rotate(ours_fn, a, b)
            anchor = rotate(anchor_fn, a, b)
        flops = 2 * m * n * k
        force(None, None)
        ref = ours(0).float()
        row: dict[str, Any] = {"dtype": dt, "M": m, "N": n, "K": k, "b": lay, "TFLOPS": {},
                               "err": {}}  # fmt: skip
        try:
            row["TFLOPS"]["anchor"] = round(flops / median_ms(anchor, args.reps, 2) / 1e9, 1)
        except RuntimeError as e:
            row["TFLOPS"]["anchor"] = None
            print(f"anchor failed: {e}", file=sys.stderr)
        for v, s in candidates(m, n, variants, splits):
            if dt in ("fp8rowcol", "fp8block", "int8") and s > 1:
                continue
            force(v, s)
            try:
                y = ours(0).float()
                err = ((y - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
                t = median_ms(ours, args.reps, 2)
            except Exception as e:  # a candidate that fails is reported, the sweep goes on
                print(f"{dt} {m}x{n}x{k} {v}/s{s} failed: {e}", file=sys.stderr)
                continue
            row["TFLOPS"][f"{v}/s{s}"] = round(flops / t / 1e9, 1)
            row["err"][f"{v}/s{s}"] = float(f"{err:.2e}")
        force(None, None)
        row["TFLOPS"]["table"] = round(flops / median_ms(ours, args.reps, 2) / 1e9, 1)
        tf = row["TFLOPS"]
        best = max((x for x in tf if "/" in x), key=lambda x: tf[x])
        print(f"{dt:9s} {m:5d}x{n:5d}x{k:5d} {lay} anchor {tf['anchor']} table {tf['table']} "
              f"best {best} {tf[best]} | " + " ".join(f"{x}={y}" for x, y in tf.items()
                                                      if "/" in x), flush=True)  # fmt: skip
        results.append(row)
        del a, b, ours, anchor
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
