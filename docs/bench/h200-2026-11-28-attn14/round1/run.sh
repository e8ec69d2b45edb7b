#!/usr/bin/env bash
# attn14 round 1: half_first twins (_h: the first key tile's S over its lower kBN / 2 keys where
# no row of the consumer sees past them; _hs: and its softmax over those columns alone) beside
# their base variants (SASS-identical to main's). Twin check on odd shapes, the forced sweep
# beside SDPA cuDNN in one process, then ncu of main's kernel and cuDNN at d 128 full N 512.
set -u
case "$1" in
build)
  cp -r xsite "$SITE"
  ;;
gpu)
  T0=$(date +%s)
  el() { echo $(( $(date +%s) - T0 )); }
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
  W=/tmp/attn14; mkdir -p $W
  cat > $W/check.py <<'PYEOF'
"""attn14 twin check (outside the repo): each twin forced beside its base variant on odd shapes
(causal with Sq != Sk, windows, partial last tiles, GQA, softcap, varlen, LSE); the twin's
output must equal the base's bit for bit, and both stay within tolerance of an f32 reference.
argv: base:twin,twin ..."""
import importlib
import os
import sys

import torch

import aotkernels as ak

A = importlib.import_module("aotkernels.ops.attention")
orig_tiles = A._tiles
KEY = {"var": None}


def tiles(fam, dtype):
    env = os.environ.pop(A.ENV, None)
    try:
        out = orig_tiles(fam, dtype)
    finally:
        if env is not None:
            os.environ[A.ENV] = env
    var = KEY["var"]
    return [t._replace(min_keys=0, min_keys_masked=None, min_queries=0, masked_only=0)
            if t.name == var else t for t in out if t.path != "fa3" or t.name == var]


A._tiles = tiles


def run(var, fn):
    KEY["var"] = var
    os.environ[A.ENV] = f"chk|{var}"
    r = fn()
    torch.cuda.synchronize()
    return r


def ref(q, k, v, causal, window, softcap):
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    qf, kf, vf = (x.float().transpose(1, 2) for x in (q, k, v))
    kf = kf.repeat_interleave(h // hk, 1)
    vf = vf.repeat_interleave(h // hk, 1)
    s = qf @ kf.transpose(-1, -2) / d ** 0.5
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq, device=q.device)[:, None] + sk - sq
    j = torch.arange(sk, device=q.device)[None, :]
    vis = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if causal:
        vis &= j <= i
    if window:
        lft, rgt = window
        if lft >= 0:
            vis &= j >= i - lft
        if rgt >= 0:
            vis &= j <= i + rgt
    s = s.masked_fill(~vis, float("-inf"))
    pr = torch.softmax(s, -1).nan_to_num(0.0)
    return (pr @ vf).transpose(1, 2)


bad = 0
torch.manual_seed(0)
for spec in sys.argv[1:]:
    base, twins = spec.split(":")
    d = int(base.split("_d")[1].split("_")[0])
    cases = [
        # b, sq, sk, h, hk, causal, window, softcap
        (2, 512, 512, 4, 4, True, None, None),
        (2, 600, 600, 4, 2, True, None, None),
        (1, 300, 700, 4, 4, True, None, None),
        (1, 700, 300, 4, 4, True, None, None),
        (2, 1000, 1000, 2, 1, False, (200, 30), None),
        (1, 777, 777, 2, 2, True, (96, 0), None),
        (2, 512, 512, 2, 2, True, None, 30.0),
        (3, 129, 129, 2, 2, True, None, None),
        (1, 2048, 2048, 2, 2, True, None, None),
        (2, 640, 576, 2, 2, False, None, None),
    ]
    for b, sq, sk, h, hk, causal, window, cap in cases:
        q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16)
        def fn():
            return ak.attention(q, k, v, causal=causal, window=window, softcap=cap,
                                return_lse=True)
        o0, l0 = run(base, fn)
        r = ref(q, k, v, causal, window, cap)
        e0 = (o0.float() - r).abs().max().item()
        for tw in twins.split(","):
            o1, l1 = run(tw, fn)
            o2, _ = run(tw, fn)
            same = torch.equal(o0, o1) and torch.equal(l0, l1)
            rep = torch.equal(o1, o2)
            e1 = (o1.float() - r).abs().max().item()
            ok = rep and e1 < 0.02
            bad += not ok
            print(f"{tw:22s} b{b} sq{sq} sk{sk} h{h}/{hk} causal={causal} window={window} "
                  f"cap={cap}: bitwise_base={same} repeat={rep} err {e1:.4f} (base {e0:.4f})"
                  f"{'' if ok else '  FAIL'}", flush=True)
print("check:", "FAILED" if bad else "all ok", bad)
PYEOF
  cat > $W/sweep.py <<'PYEOF'
"""attn13 sweep (attn12's driver) (outside the repo): bench forward shapes (16384 tokens, H = 2048 / D, bf16),
each listed fa3 variant forced in turn (min_keys 0, no mask bound, min_queries 0, not
masked_only), the order alternating by pass, beside SDPA cuDNN in the same process.
argv: out.json, passes, then groups D:c|f|cf:N,N,..:variant,variant,..."""
import importlib, json, os, sys, time
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import aotkernels as ak
from aotkernels.bench.timing import median_ms

A = importlib.import_module("aotkernels.ops.attention")
OUT, PASSES = sys.argv[1], int(sys.argv[2])
GROUPS = []
for g in sys.argv[3:]:
    d, cs, ns, vs = g.split(":")
    GROUPS.append((int(d), [c == "c" for c in cs], [int(x) for x in ns.split(",")], vs.split(",")))
F = torch.nn.functional
dt = torch.bfloat16
orig_tiles = A._tiles
KEY = {"var": None}
def tiles(fam, dtype):
    env = os.environ.pop(A.ENV, None)
    try:
        out = orig_tiles(fam, dtype)
    finally:
        if env is not None:
            os.environ[A.ENV] = env
    var = KEY["var"]
    return [t._replace(min_keys=0, min_keys_masked=None, min_queries=0, masked_only=0)
            if t.name == var else t for t in out if t.path != "fa3" or t.name == var]
A._tiles = tiles
t0 = time.time()
rows = []
for d, causals, seqs, cands in GROUPS:
    for n in seqs:
        for causal in causals:
            b, h = max(1, 16384 // n), 2048 // d
            q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=dt) for _ in range(3))
            flops = 4 * b * h * n * n * d / (2 if causal else 1)
            row = {"D": d, "N": n, "causal": causal}
            outs = {}
            for ps in range(PASSES):
                for var in cands if ps % 2 == 0 else cands[::-1]:
                    KEY["var"] = var
                    os.environ[A.ENV] = f"sweep|{var}"  # the op caches its launch per ENV value
                    fn = lambda i: ak.attention(q, k, v, causal=causal)
                    outs[var] = fn(0)
                    row.setdefault(var, []).append(flops / median_ms(fn, 20, rounds=2) / 1e9)
            os.environ.pop(A.ENV, None)
            ref = outs[cands[0]]
            for var in cands[1:]:
                row["bitwise_" + var] = bool(torch.equal(outs[var], ref))
            qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            def sd(i):
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            sd(0)
            row["cudnn"] = [flops / median_ms(sd, 20, rounds=2) / 1e9]
            rows.append(row)
            print(json.dumps({k2: ([round(x, 1) for x in v2] if isinstance(v2, list) else v2) for k2, v2 in row.items()}), flush=True)
            json.dump(rows, open(OUT, "w"), indent=1)
            del q, k, v, qt, kt, vt, outs
            torch.cuda.empty_cache()
print(f"done in {time.time() - t0:.1f} s", flush=True)
PYEOF
  cat > $W/prof.py <<'PYEOF'
"""One forward launch inside cudaProfilerStart/Stop (ncu --profile-from-start off).
argv: ours|cudnn, D, N, causal(0/1)."""
import sys
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import aotkernels as ak
who, d, n, causal = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
b, h = max(1, 16384 // n), 2048 // d
q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
def run():
    if who == "ours":
        return ak.attention(q, k, v, causal=causal)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
for _ in range(3):
    run()
torch.cuda.synchronize()
torch.cuda.profiler.start()
run()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
PYEOF
  cat > $W/top.py <<'PYEOF'
"""Top SASS lines by sampled warp stalls from `ncu -i R --page source --csv --print-source sass`
(the export may start with a kernel-name row: the header is the first row with 'Address')."""
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hi = next((i for i, r in enumerate(rows) if "Address" in r or "# Address" in r), None)
if hi is None:
    print("no header; first rows:", rows[:3]); sys.exit()
hdr = rows[hi]
col = next((i for i, h in enumerate(hdr) if h.startswith("Warp Stall Sampling (All")), None)
if col is None:
    print("columns:", hdr); sys.exit()
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
body = [r for r in rows[hi + 1:] if len(r) > col]
tot = sum(num(r[col]) for r in body) or 1
print("total samples", tot, "instructions", len(body))
keep = [i for i, h in enumerate(hdr) if h in ("Address", "# Address", "Source") or h.startswith("Warp Stall Sampling")]
for r in sorted(body, key=lambda r: -num(r[col]))[:60]:
    print(f"{100 * num(r[col]) / tot:5.1f}%", " | ".join(r[i] for i in keep))
PYEOF
  cd /tmp
  timeout 15 python3 $W/check.py fa3_d64_defer:fa3_d64_defer_h,fa3_d64_defer_hs \
    fa3_d128:fa3_d128_h,fa3_d128_hs fa3_d256:fa3_d256_h,fa3_d256_hs > "$RES/check.txt" 2>&1
  echo "check rc $? t=$(el)"; tail -1 "$RES/check.txt"
  timeout 42 python3 $W/sweep.py "$RES/sweep.json" 3 \
    64:c:512,1024:fa3_d64_defer,fa3_d64_defer_h,fa3_d64_defer_hs \
    128:c:512:fa3_d128,fa3_d128_h,fa3_d128_hs \
    256:c:512:fa3_d256,fa3_d256_h,fa3_d256_hs \
    64:c:2048,4096:fa3_d64_m192,fa3_d64_defer,fa3_d64_defer_hs \
    128:c:1024:fa3_d128,fa3_d128_h,fa3_d128_hs \
    256:c:1024:fa3_d256,fa3_d256_h,fa3_d256_hs \
    > "$RES/sweep.txt" 2>&1; echo "sweep rc $? t=$(el)"
  tail -2 "$RES/sweep.txt"
  NCU="ncu --clock-control none --profile-from-start off --set full --import-source no -c 1"
  for spec in "ours 128 512 0" "cudnn 128 512 0"; do
    tag=$(echo $spec | tr ' ' _)
    lim=$(( 86 - $(el) )); [ $lim -lt 8 ] && break
    PYTHONPATH="$BASE" timeout $lim $NCU -f -o $W/$tag python3 $W/prof.py $spec > "$RES/ncu_$tag.log" 2>&1
    echo "ncu $tag rc $? t=$(el)"
    ( ncu -i $W/$tag.ncu-rep --page details > "$RES/ncu_$tag.txt" 2>&1
      ncu -i $W/$tag.ncu-rep --page source --csv --print-source sass > $W/$tag.csv 2>/dev/null
      python3 $W/top.py $W/$tag.csv > "$RES/ncu_${tag}_top.txt" 2>&1
      gzip -c $W/$tag.csv > "$RES/ncu_${tag}_sass.csv.gz" ) &
  done
  wait
  echo "end t=$(el)"
  ;;
esac
