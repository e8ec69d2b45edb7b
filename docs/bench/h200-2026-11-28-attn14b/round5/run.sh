#!/usr/bin/env bash
# attn14b round 5: arch_matrix-only twins (measurement only, min_keys 2^30), forced, one process,
# SDPA cuDNN after them: more K / V stages where shared memory allows: fa3_d64_defer now with 6
# (twins _s4 = attn14's 4, _s5); fa3_d64_m192 with 5 and one Q buffer (no q_ahead); fa3_d128
# with 3, one Q buffer and the register epilogue. Then the GPU tests of this tree (sanitizers
# beside).
set -u
case "$1" in
build)
  cp -r xsite "$SITE"
  ;;
gpu)
  T0=$(date +%s)
  el() { echo $(( $(date +%s) - T0 )); }
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
  W=/tmp/attn14b; mkdir -p $W
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
            ref_sd = sd(0).transpose(1, 2)
            for var in cands:
                row["err_" + var] = float((outs[var].float() - ref_sd.float()).abs().max())
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
  TREE=$PWD
  cd /tmp
  export PYTHONPATH="$SITE"
  timeout 22 python3 $W/sweep.py "$RES/sweep.json" 5 \
    64:c:512,1024:fa3_d64_defer,fa3_d64_defer_s4,fa3_d64_defer_s5 \
    64:f:512,1024:fa3_d64_m192,fa3_d64_m192_k,fa3_d64_m192_q1s5 \
    128:f:512,1024:fa3_d128,fa3_d128_q1s3 \
    128:c:512:fa3_d128_qahead,fa3_d128_q1s3 \
    64:c:2048:fa3_d64_m192,fa3_d64_defer,fa3_d64_defer_s4 \
    64:f:2048:fa3_d64_m192,fa3_d64_m192_q1s5 \
    > "$RES/sweep.txt" 2>&1; echo "sweep rc $? t=$(el)"
  tail -1 "$RES/sweep.txt"
  cd "$TREE"
  unset PYTHONPATH
  export PYTHONPATH="$SITE"
  lim=$(( 68 - $(el) ))
  timeout $lim python3 -m pytest -v -m gpu tests/test_attention.py -p no:cacheprovider \
    -k "sanitizer and auto and memcheck" > "$RES/memcheck.txt" 2>&1 &
  MC=$!
  timeout $lim python3 -m pytest -v -m gpu tests/test_attention.py -p no:cacheprovider \
    -k "sanitizer and auto and racecheck" > "$RES/racecheck.txt" 2>&1 &
  RC=$!
  timeout $(( lim - 2 )) python3 -m pytest -q -m gpu tests/test_attention.py -p no:cacheprovider \
    -k "not sanitizer" > "$RES/pytest.txt" 2>&1; echo "pytest rc $? t=$(el)"
  tail -1 "$RES/pytest.txt"
  wait $MC; echo "memcheck rc $? t=$(el)"
  grep -E "PASS|FAIL|passed|failed" "$RES/memcheck.txt" | tail -2
  wait $RC; echo "racecheck rc $? t=$(el)"
  grep -E "PASS|FAIL|passed|failed" "$RES/racecheck.txt" | tail -2
  echo "end t=$(el)"
  cd "$TREE"
  ;;
esac
