#!/usr/bin/env bash
# m128 round 3 (final candidate: + wg_128x64, the M <= 128 / few-tile rules; wg_64x64c2 dropped):
# GPU tests of the variants and the table (sanitizers included), then a short paired timing of
# the rows whose pick changed (this table vs main's, one process, alternating).
set -u
case "$1" in
build)
  cp -r xsite "$SITE"
  ;;
gpu)
  T0=$(date +%s)
  el() { echo "t=$(( $(date +%s) - T0 ))"; }
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
  python3 -c "import json,sys; f=json.load(open(sys.argv[1]))['families']['gemm']; print('new gemm entries', len(f['entries']), [(i['target'], i['bytes']) for i in f['images']])" "$SITE/aotkernels/kernels/manifest.json"
  timeout 36 python3 -m pytest -q -m gpu --maxfail=10 -p no:cacheprovider tests/test_gemm_numerics.py \
    tests/test_gemm_tiles.py > "$RES/test_gemm.txt" 2>&1; echo "gemm tests rc $?"
  tail -4 "$RES/test_gemm.txt"; el
  cat > /tmp/m128_drive.py <<'PYEOF'
"""Paired GEMM timings, one process: the anchor, this build's table ("table"), main's table
("old": 0614ad2's rules for M > 32, re-stated here) and forced candidates ("<variant>/s<N>"),
measured in alternating rounds. Rows: <dtype>:MxNxK[:kn] (bf16, fp8, fp8fast, int8)."""

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


def old_tile(m: int, n: int, batch: int, sms: int, block: bool, a_kmajor: bool = True, *_: Any) -> str:
    t = gemm._tiles
    if gemm._swaps(m, batch, block, a_kmajor):
        return TILE0(m, n, batch, sms, block, a_kmajor)
    if m <= 64:
        return "wg_64x128"
    if m <= 128:
        return "wg_64x64" if t(batch, m, n, 64, 128) <= sms // 2 else "wg_64x128"
    wide = t(batch, m, n, 128, 256)
    if wide < sms // 2:
        return "wg_64x128"
    if block:
        return "wg_128x256"
    narrow = t(batch, m, n, 128, 128)
    fill = gemm._last_wave_fill
    return "wg_128x128" if fill(narrow, sms) > fill(wide, sms) + 0.05 else "wg_128x256"


def tile(m: int, n: int, batch: int, sms: int, block: bool, *rest: Any) -> str:
    v = state.get("variant")
    if v is None:
        return TILE0(m, n, batch, sms, block, *rest)
    if v == "old":
        return old_tile(m, n, batch, sms, block, *rest)
    return v


def split_k(dtype: str, m: int, n: int, k: int, batch: tuple[int, ...], *rest: Any) -> Any:
    s = state.get("splits")
    if s is None:
        return SPLIT0(dtype, m, n, k, batch, *rest)
    if s == "old":
        if m > 64:
            return gemm._Split(1, 0)
        return SPLIT0(dtype, m, n, k, batch, *rest)  # M <= 64: unchanged by this branch
    blocks = math.ceil(k / 128)
    per = math.ceil(blocks / s)
    if s <= 1 or per >= blocks:
        return gemm._Split(1, 0)
    return gemm._Split(math.ceil(blocks / per), per * 128)


PICK0 = gemm._pick


def pick(*a: Any, **kw: Any) -> Any:
    got = PICK0(*a, **kw)
    state["last"] = got.symbol
    return got


gemm._wgmma_tile, gemm._split_k, gemm._pick = tile, split_k, pick


def force(cand: str) -> None:
    for key in ("variant", "splits"):
        state.pop(key, None)
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
    if dt in ("fp8", "fp8fast"):
        return bg._fp8_cases(torch, ak, shape, ("tensor",), dt == "fp8fast")[0]
    return bg._int8_cases(torch, ak, shape)[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", required=True)
    ap.add_argument("--cands", default="table,old")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default=None)
    ap.add_argument("--budget", type=float, default=1e9, help="seconds; no new row after")
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
        m, n, k = (int(x) for x in shape.split("x"))
        case = cases(dt, m, n, k, layout or "kk")
        flops = 2 * m * n * k
        samples: dict[str, list[float]] = {"anchor": []}
        errs: dict[str, float] = {}
        picks: dict[str, str] = {}
        ref = case.anchor(0).float()
        for c in cands:
            force(c)
            try:
                y = case.ours(0).float()
                errs[c] = float(((y - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item())
                picks[c] = state.get("last", "?")
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
        print(f"{row:26s} anchor {tf['anchor']:7.1f} | "
              + " ".join(f"{c}={tf[c]}({ratio[c]:.2f})" for c in cands if c in tf), flush=True)
        print(f"{'':26s} picks " + " ".join(f"{c}={picks.get(c)}" for c in cands), flush=True)
        out.append({"row": row, "TFLOPS": tf, "ratio": ratio, "err": errs, "picks": picks})
        del case
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
PYEOF
  ROWS=fp8:128x14336x4096,int8:1024x1024x1024,fp8:1024x1024x1024,bf16:128x14336x4096,bf16:128x14336x4096:kn,int8:128x14336x4096,fp8:128x8192x8192,int8:128x8192x8192,fp8:128x4096x4096,bf16:128x4096x4096
  lim=$(( 57 - $(date +%s) + T0 ))
  [ $lim -gt 8 ] && (cd /tmp && timeout $lim python3 /tmp/m128_drive.py --rows $ROWS --cands table,old --rounds 5 \
    --reps 20 --budget $(( lim - 8 )) --json "$RES/drive.json" > "$RES/drive.txt" 2>&1; echo "drive rc $?")
  cat "$RES/drive.txt"; el
  ;;
esac
