"""Small-M GEMM candidates beside the anchor, paired (alternating rounds), one process.

Candidates: "table" (this build's table), "<variant>" (forced, the table's split rule kept).
Rows "<dtype>:MxNxK[:kn]" (bf16, fp8 / fp8fast per-tensor, int8). Prints TFLOP/s and
anchor/ours ratios and the max relative error of each candidate vs the anchor.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import torch

import aotkernels as ak
from aotkernels.bench import gemm as bg
from aotkernels.bench.timing import gpu_samples
from aotkernels.ops import _op, gemm

TILE0 = gemm._wgmma_tile
state: dict[str, Any] = {}


def tile(m: int, n: int, batch: int, sms: int, block: bool, *rest: Any) -> str:
    v = state.get("variant")
    return TILE0(m, n, batch, sms, block, *rest) if v is None else v


gemm._wgmma_tile = tile


def force(cand: str) -> None:
    state.clear()
    if cand != "table":
        state["variant"] = cand
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
    ap.add_argument("--cands", default="table")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default=None)
    ap.add_argument("--budget", type=float, default=1e9)
    ap.add_argument("--dump", default=None, help="torch.save the table's first output per row")
    args = ap.parse_args()
    dumps: dict[str, Any] = {}
    t0 = time.time()
    out = []
    for spec in args.rows.split(","):
        if time.time() - t0 > args.budget:
            print("budget reached", flush=True)
            break
        row, _, cl = spec.partition("=")
        cands = ["table"] + [
            c for c in (cl.split("+") if cl else args.cands.split("+")) if c and c != "table"
        ]
        dt, _, rest = row.partition(":")
        shape, _, layout = rest.partition(":")
        layout = layout or "kk"
        m, n, k = (int(x) for x in shape.split("x"))
        torch.manual_seed(1234)
        case = cases(dt, m, n, k, layout)
        flops = 2 * m * n * k
        samples: dict[str, list[float]] = {"anchor": []}
        errs: dict[str, float] = {}
        ref = case.anchor(0).float()
        for c in cands:
            force(c)
            try:
                y0 = case.ours(0)
                if c == "table":
                    dumps[row] = y0.cpu()
                y = y0.float()
                errs[c] = float(((y - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item())
                samples[c] = []
            except Exception as e:
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
        us = {c: round(ms * 1e3, 2) for c, ms in med.items()}
        print(
            f"{row:26s} anchor {tf['anchor']:6.1f} ({us['anchor']}us) | "
            + " ".join(
                f"{c}={tf[c]}({ratio[c]:.3f},{us[c]}us,e{errs.get(c, -1):.1e})"
                for c in cands
                if c in tf
            ),
            flush=True,
        )
        out.append({"row": row, "TFLOPS": tf, "ratio": ratio, "us": us, "err": errs})
        del case
        torch.cuda.empty_cache()
    if args.dump:
        torch.save(dumps, args.dump)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
