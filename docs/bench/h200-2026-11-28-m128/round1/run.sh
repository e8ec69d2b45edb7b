#!/usr/bin/env bash
# m128 round 1: sweep every wgmma variant x split count (1-4) on the M = 128 and few-tile rows
# beside the anchor (tools/gemm_sweep.py, new candidate variants wg_128x64 / wg_64x128c2), and a
# profiler probe of which kernels cuBLAS runs on those rows.
set -u
case "$1" in
build)
  cp -r xsite "$SITE"
  ;;
gpu)
  T0=$(date +%s)
  el() { echo "t=$(( $(date +%s) - T0 ))"; }
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
  SW="python3 $PWD/tools/gemm_sweep.py --reps 30"
  V128=wg_64x64,wg_64x128,wg_64x128c2,wg_128x64,wg_128x128,wg_128x256
  M128=128x4096x4096,128x14336x4096,128x4096x14336,128x8192x8192
  cat > /tmp/m128_probe.py <<'PYEOF'
"""Which kernels cuBLAS (and our table) run per row: torch.profiler trace of a few calls of
each, kernel names with grid, block and duration (us). Rows: dtype:MxNxK[:kn]."""

import json
import sys
from collections import defaultdict

import torch

import aotkernels as ak

rows = sys.argv[1].split(",")
out_json = sys.argv[2]
calls = []
for row in rows:
    dt, shape, *lay = row.split(":")
    m, n, k = (int(x) for x in shape.split("x"))
    if dt == "bf16":
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        if lay == ["kn"]:
            b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        else:
            b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
        calls.append((row, lambda a=a, b=b: ak.matmul(a, b), lambda a=a, b=b: torch.matmul(a, b)))
    elif dt == "int8":
        a = torch.randint(-8, 8, (m, k), device="cuda", dtype=torch.int8)
        b = torch.randint(-8, 8, (n, k), device="cuda", dtype=torch.int8).t()
        calls.append((row, lambda a=a, b=b: ak.scaled_mm(a, b, out_dtype=torch.int32),
                      lambda a=a, b=b: torch._int_mm(a, b)))
    else:
        fast = dt == "fp8fast"
        f8 = torch.float8_e4m3fn
        a = torch.randn(m, k, device="cuda").to(f8)
        b = torch.randn(n, k, device="cuda").to(f8).t()
        s = torch.ones(1, device="cuda")
        calls.append((row,
                      lambda a=a, b=b, s=s, f=fast: ak.scaled_mm(a, b, s, s, torch.bfloat16,
                                                                 use_fast_accum=f),
                      lambda a=a, b=b, s=s, f=fast: torch._scaled_mm(
                          a, b, s, s, out_dtype=torch.bfloat16, use_fast_accum=f)))
for _, ours, anchor in calls:
    for _ in range(3):
        ours(), anchor()
torch.cuda.synchronize()
res = {}
for row, ours, anchor in calls:
    for who, fn in (("ours", ours), ("anchor", anchor)):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
        prof.export_chrome_trace("/tmp/m128_trace.json")
        ev = json.load(open("/tmp/m128_trace.json"))["traceEvents"]
        ks = defaultdict(list)
        for e in ev:
            if e.get("cat") == "kernel":
                a_ = e.get("args", {})
                key = (e["name"][:90], str(a_.get("grid")), str(a_.get("block")),
                       a_.get("shared memory"), a_.get("registers per thread"))
                ks[key].append(e["dur"])
        res[f"{row} {who}"] = [
            {"name": k_[0], "grid": k_[1], "block": k_[2], "smem": k_[3], "regs": k_[4],
             "us": sorted(v)[len(v) // 2], "calls": len(v)} for k_, v in ks.items()]
        for d in res[f"{row} {who}"]:
            print(f"{row:22s} {who:6s} {d['us']:7.1f} us x{d['calls']} grid {d['grid']} "
                  f"block {d['block']} smem {d['smem']} regs {d['regs']} {d['name']}", flush=True)
json.dump(res, open(out_json, "w"), indent=1)
PYEOF
  cd /tmp
  timeout 45 $SW --dtypes bf16,fp8 --layouts kk,kn --shapes $M128 --variants $V128 --splits 1,2,3,4 \
    --json "$RES/sweep_m128.json" > "$RES/sweep_m128.txt" 2>&1; echo "sweep m128 rc $?"; el
  cat "$RES/sweep_m128.txt"
  timeout 22 python3 /tmp/m128_probe.py bf16:128x4096x4096,bf16:128x4096x4096:kn,bf16:128x14336x4096,bf16:128x4096x14336,bf16:128x8192x8192,fp8:128x4096x4096,fp8:128x14336x4096,fp8:128x4096x14336,fp8:128x8192x8192,bf16:1024x1024x1024,fp8:1024x1024x1024,int8:1024x1024x1024,fp8:2048x2048x2048,bf16:1024x14336x4096 "$RES/probe.json" > "$RES/probe.txt" 2>&1; echo "probe rc $?"; el
  timeout 35 $SW --dtypes bf16,fp8,int8 --layouts kk,kn \
    --shapes 1024x1024x1024,2048x2048x2048,1024x14336x4096,1024x4096x4096 \
    --variants $V128,wg_128x256c2 --splits 1,2,3 \
    --json "$RES/sweep_few.json" > "$RES/sweep_few.txt" 2>&1; echo "sweep few rc $?"; el
  cat "$RES/sweep_few.txt"
  lim=$(( 112 - $(date +%s) + T0 ))
  [ $lim -gt 5 ] && timeout $lim $SW --dtypes fp8fast,int8 --shapes $M128 --variants $V128 --splits 1,2,3,4 \
    --json "$RES/sweep_fast.json" > "$RES/sweep_fast.txt" 2>&1; echo "sweep fast rc $?"; el
  cat "$RES/sweep_fast.txt"
  cat "$RES/probe.txt" | grep -v Warning
  ;;
esac
