"""Tile candidates beside the anchor on a hot (power-capped) or cool H200, one process.

Each row: every candidate (forced through the tile table) and the anchor, in alternating rounds;
before each round the GPU is heated by --heat s of 8192^3 bf16 matmuls ("hot") or left idle for
--idle s ("cool"). Prints TFLOP/s, ratio to the anchor, error vs the anchor, and the SM clock /
power sampled right after the row. Rows: "<dtype>:MxNxK[:kn]" with dtype bf16, fp8 (per-tensor),
fp8fast, fp8rowcol, fp8block, int8; "=cand+cand" after a row replaces --cands for it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
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


def tile(m: int, n: int, batch: int, sms: int, block: bool, *rest: Any, **kw: Any) -> str:
    v = state.get("variant")
    return TILE0(m, n, batch, sms, block, *rest, **kw) if v is None else v


gemm._wgmma_tile = tile


def force(cand: str) -> None:
    state.clear()
    if cand != "table":
        state["variant"] = cand
    _op._PLANS.clear()


def cases(dt: str, m: int, n: int, k: int, layout: str) -> Any:
    shape = bg.GemmShape("llm", m, n, k)
    if dt == "bf16":
        return bg._float_cases(torch, ak, "bf16", shape)[0 if layout == "kk" else 1]
    if dt.startswith("fp8"):
        mode = {"fp8": "tensor", "fp8fast": "tensor", "fp8rowcol": "rowcol"}.get(dt, "block")
        return bg._fp8_cases(torch, ak, shape, (mode,), dt == "fp8fast")[0]
    return bg._int8_cases(torch, ak, shape)[0]


big = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)


def heat(s: float) -> None:
    t = time.time()
    while time.time() - t < s:
        for _ in range(4):
            big @ big
        torch.cuda.synchronize()


def clock() -> str:
    return subprocess.run(
        ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader"],
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", required=True)
    ap.add_argument("--cands", default="table")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--heat", type=float, default=0.4)
    ap.add_argument("--idle", type=float, default=0.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--budget", type=float, default=1e9)
    args = ap.parse_args()
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
        picks: dict[str, str] = {}
        for c in cands:
            force(c)
            try:
                y = case.ours(0).float()
                errs[c] = float(((y - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item())
                samples[c] = []
            except Exception as e:
                print(f"{row} {c} failed: {e}", file=sys.stderr, flush=True)
        force("table")
        plan = next(iter(_op._PLANS.values()), None) if _op._PLANS else None
        picks["table"] = str(getattr(plan, "launches", [None])[0])[:80] if plan else "?"
        order = [c for c in cands if c in samples] + ["anchor"]
        for r in range(args.rounds):
            if args.heat:
                heat(args.heat)
            elif args.idle:
                time.sleep(args.idle)
            for c in order[r % len(order) :] + order[: r % len(order)]:
                if c == "anchor":
                    samples["anchor"] += gpu_samples(case.anchor, args.reps)
                else:
                    force(c)
                    samples[c] += gpu_samples(case.ours, args.reps)
        ck = clock()
        force("table")
        med = {c: statistics.median(v) for c, v in samples.items() if v}
        tf = {c: round(flops / ms / 1e9, 1) for c, ms in med.items()}
        ratio = {c: round(med["anchor"] / ms, 3) for c, ms in med.items() if c != "anchor"}
        us = {c: round(ms * 1e3, 2) for c, ms in med.items()}
        best = max(ratio, key=ratio.get)
        print(
            f"{row:24s} anchor {tf['anchor']:6.1f} | "
            + " ".join(f"{c}={ratio[c]:.3f}" for c in cands if c in ratio)
            + f" | best {best} | {ck}",
            flush=True,
        )
        out.append({"row": row, "TFLOPS": tf, "ratio": ratio, "us": us, "err": errs,
                    "clock": ck, "state": "hot" if args.heat else "cool"})  # fmt: skip
        del case, ref
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
