"""GEMM kernels of two builds beside the anchor in one process, hot (power-capped) or cool.

The package imported is the candidate build; ``--base SITE`` names another install (main's)
whose gemm fatbin is loaded into the same process. A candidate is ``table`` (the candidate's
kernels, the table's pick), ``base`` (main's kernels, the same pick: the table code is the
imported one), ``<variant>`` (the candidate's kernels, that variant forced) or
``base/<variant>``. Rounds alternate the candidates and the anchor; before each round the GPU
is heated by --heat s of 8192^3 bf16 matmuls ("hot") or left idle --idle s ("cool"). Prints
the ratio to the anchor (median of the round's samples) and whether each candidate's output
is bit-equal to ``base``'s. Rows: "<dtype>:MxNxK" with dtype fp8 (per-tensor, two-level),
fp8fast, fp8rowcol, bf16, int8; "=cand+cand" after a row replaces --cands for it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

import aotkernels as ak
from aotkernels import device as _device
from aotkernels import loader
from aotkernels.bench import gemm as bg
from aotkernels.bench.timing import gpu_samples
from aotkernels.ops import _op, gemm

TILE0 = gemm._wgmma_tile
state: dict[str, Any] = {}
families: dict[str, Any] = {}


def tile(m: int, n: int, batch: int, sms: int, block: bool, *rest: Any, **kw: Any) -> str:
    v = state.get("variant")
    return TILE0(m, n, batch, sms, block, *rest, **kw) if v is None else v


gemm._wgmma_tile = tile


def load_families(base_site: str) -> None:
    """The candidate's gemm family and main's (its fatbin and manifest), both on device 0."""
    families["new"] = loader.family_on("gemm", 0)
    saved_dir, saved_manifest = loader.KERNELS_DIR, loader._manifest
    saved_bins = dict(loader._fatbins)
    try:
        loader.KERNELS_DIR = Path(base_site) / "aotkernels" / "kernels"
        loader._manifest = None
        loader._fatbins.clear()
        families["base"] = loader._load("gemm", _device.device_info(0))
    finally:
        loader.KERNELS_DIR, loader._manifest = saved_dir, saved_manifest
        loader._fatbins.clear()
        loader._fatbins.update(saved_bins)


def force(cand: str) -> None:
    build, _, variant = cand.rpartition("/")
    if cand == "base":
        build, variant = "base", "table"
    loader._loaded[("gemm", 0)] = families[build or "new"]
    state.clear()
    if variant != "table":
        state["variant"] = variant
    _op._PLANS.clear()


def cases(dt: str, m: int, n: int, k: int) -> Any:
    shape = bg.GemmShape("llm", m, n, k)
    if dt == "bf16":
        return bg._float_cases(torch, ak, "bf16", shape)[0]
    if dt.startswith("fp8"):
        mode = {"fp8": "tensor", "fp8fast": "tensor", "fp8rowcol": "rowcol"}[dt]
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
    ap.add_argument("--base", required=True)
    ap.add_argument("--rows", required=True)
    ap.add_argument("--cands", default="base+table")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--heat", type=float, default=0.4)
    ap.add_argument("--idle", type=float, default=0.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--budget", type=float, default=1e9)
    args = ap.parse_args()
    load_families(args.base)
    t0 = time.time()
    out = []
    for spec in args.rows.split(","):
        if time.time() - t0 > args.budget:
            print("budget reached", flush=True)
            break
        row, _, cl = spec.partition("=")
        cands = [c for c in (cl or args.cands).split("+") if c]
        if "base" not in cands:
            cands.insert(0, "base")
        dt, _, shape = row.partition(":")
        m, n, k = (int(x) for x in shape.split("x"))
        torch.manual_seed(1234)
        case = cases(dt, m, n, k)
        flops = 2 * m * n * k
        samples: dict[str, list[float]] = {"anchor": []}
        outs: dict[str, Any] = {}
        for c in cands:
            force(c)
            try:
                outs[c] = case.ours(0).clone()
                samples[c] = []
            except Exception as e:
                print(f"{row} {c} failed: {e}", file=sys.stderr, flush=True)
        same = {c: bool(torch.equal(y, outs["base"])) for c, y in outs.items()}
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
        ratio = {c: round(med["anchor"] / ms, 3) for c, ms in med.items() if c != "anchor"}
        us = {c: round(ms * 1e3, 2) for c, ms in med.items()}
        tf = round(flops / med["anchor"] / 1e9, 1)
        print(
            f"{row:22s} anchor {tf:6.1f} | "
            + " ".join(f"{c}={ratio[c]:.3f}{'' if same[c] else '!'}" for c in cands if c in ratio)
            + f" | {ck}",
            flush=True,
        )
        out.append({"row": row, "ratio": ratio, "us": us, "bit_equal_base": same,
                    "clock": ck, "state": "hot" if args.heat else "cool"})  # fmt: skip
        del case, outs
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
