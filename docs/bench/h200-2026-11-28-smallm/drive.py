"""Small-M GEMM candidates beside the anchor, paired (alternating rounds), one process: the
driver behind this folder's paired timings (run from a folder without python/aotkernels, the
build under test on PYTHONPATH).

Candidates (ours): "table" (this build's tile table), "old" (main's choice: wg_64x128 and the
split rule for M <= 64), "<variant>/sN" (a wgmma variant forced with N splits). Rows are
"<dtype>:MxNxK[:kn]" (bf16, fp8 and fp8fast per-tensor scales, int8; b K-major unless kn). Prints
TFLOP/s and anchor/ours ratios, writes JSON.

python3 drive.py --rows bf16:16x4096x4096,... --cands table,old,wg_16x64t/s2 --rounds 4
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from typing import Any

import torch

import aotkernels as ak
from aotkernels.bench import gemm as bg
from aotkernels.bench.timing import gpu_samples
from aotkernels.ops import _op, gemm

TILE0, SPLIT0 = gemm._wgmma_tile, gemm._split_k
state: dict[str, Any] = {}


def tile(m: int, n: int, batch: int, sms: int, block: bool, *rest: Any) -> str:
    v = state.get("variant")
    if v == "old":
        if m <= 64:
            return "wg_64x128"
        return TILE0(m, n, batch, sms, block, *rest)
    if v is None:
        return TILE0(m, n, batch, sms, block, *rest)
    return v


def split_k(dtype: str, m: int, n: int, k: int, batch: tuple[int, ...], *rest: Any) -> Any:
    s = state.get("splits")
    if s is None:
        return SPLIT0(dtype, m, n, k, batch, *rest)
    if s == "old":
        return old_split(dtype, m, n, k, batch)
    blocks = math.ceil(k / 128)
    per = math.ceil(blocks / s)
    if s <= 1 or per >= blocks:
        return gemm._Split(1, 0)
    return gemm._Split(math.ceil(blocks / per), per * 128)


def old_split(dtype: str, m: int, n: int, k: int, batch: tuple[int, ...]) -> Any:
    """main's rule (8448c81): wg_64x128 tiles, half of 132 CTAs, >= 48 stages per split."""
    from aotkernels.arrays import ITEMSIZE
    from aotkernels.dtypes import split_dtype

    if m > 64 or math.prod(batch) > 1 or split_dtype(dtype)[0] == "int8" or not n or m == 0:
        return gemm._Split(1, 0)
    stages = math.ceil(k * ITEMSIZE[split_dtype(dtype)[0]] / 128)
    tiles = math.ceil(n / 128)
    splits = min(132 // (2 * tiles), stages // 48, 16)
    if splits < 2:
        return gemm._Split(1, 0)
    blocks = math.ceil(k / 128)
    per = math.ceil(blocks / splits)
    return gemm._Split(math.ceil(blocks / per), per * 128)


gemm._wgmma_tile, gemm._split_k = tile, split_k


def force(cand: str) -> None:
    state.clear()
    if cand == "old":
        state.update(variant="old", splits="old")
    elif cand != "table":
        v, s = cand.split("/s")
        state.update(variant=v, splits=int(s))
    _op._PLANS.clear()


def cases(dt: str, m: int, n: int, k: int, layout: str) -> Any:
    shape = bg.GemmShape("llm", m, n, k)
    if dt == "bf16":
        cs = bg._float_cases(torch, ak, "bf16", shape)
        return cs[0] if layout == "kk" else cs[1]
    if dt == "fp8":
        return bg._fp8_cases(torch, ak, shape, ("tensor",), False)[0]
    if dt == "fp8fast":
        return bg._fp8_cases(torch, ak, shape, ("tensor",), True)[0]
    return bg._int8_cases(torch, ak, shape)[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", required=True)
    ap.add_argument("--cands", default="table,old")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default=None)
    ap.add_argument("--budget", type=float, default=1e9, help="seconds; stop adding rows after")
    args = ap.parse_args()
    t0 = time.time()
    out = []
    cands = args.cands.split(",")
    for row in args.rows.split(","):
        if time.time() - t0 > args.budget:
            print("budget reached", flush=True)
            break
        dt, _, rest = row.partition(":")
        shape, _, layout = rest.partition(":")
        layout = layout or "kk"
        m, n, k = (int(x) for x in shape.split("x"))
        case = cases(dt, m, n, k, layout)
        flops = 2 * m * n * k
        samples: dict[str, list[float]] = {"anchor": []}
        errs: dict[str, float] = {}
        ref = case.anchor(0).float()
        for c in cands:
            force(c)
            try:
                y = case.ours(0).float()
                errs[c] = float(((y - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item())
                samples[c] = []
            except Exception as e:  # a candidate that fails is reported, the rest go on
                print(f"{row} {c} failed: {e}", file=sys.stderr, flush=True)
        for _ in range(args.rounds):
            samples["anchor"] += gpu_samples(case.anchor, args.reps)
            for c in cands:
                if c in samples:
                    force(c)
                    samples[c] += gpu_samples(case.ours, args.reps)
        force("table")
        med = {c: statistics.median(v) for c, v in samples.items() if v}
        tf = {c: round(flops / ms / 1e9, 1) for c, ms in med.items()}
        ratio = {c: round(med["anchor"] / ms, 3) for c, ms in med.items() if c != "anchor"}
        print(
            f"{row:28s} anchor {tf['anchor']:7.1f} | "
            + " ".join(f"{c}={tf[c]}({ratio[c]:.2f})" for c in cands if c in tf),
            flush=True,
        )
        out.append({"row": row, "TFLOPS": tf, "ratio": ratio, "err": errs})
        del case
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
