#!/usr/bin/env bash
# attn13 round 1: early exponentials (early_exp columns per tile computed against the rows'
# current reference before the max; early_dep: the vote depends on them) as the defaults of the
# fa3 variants; twins _e0 (none: main's arithmetic and order), _eN (other counts), _nd (no
# dependency), fa3_d64_u (fa3_d64 with wg_uniform). Suite, memcheck and racecheck side by side,
# then the forced sweep (attn12's driver) beside SDPA cuDNN in one process.
set -u
case "$1" in
build)
  cp -r xsite "$SITE"
  ;;
gpu)
  T0=$(date +%s)
  el() { echo $(( $(date +%s) - T0 )); }
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
  W=/tmp/attn13; mkdir -p $W
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
  TREE=$PWD
  timeout 60 python3 -m pytest -v -m gpu tests/test_attention.py -p no:cacheprovider \
    -k "sanitizer and auto and memcheck" > "$RES/memcheck.txt" 2>&1 &
  MC=$!
  timeout 60 python3 -m pytest -v -m gpu tests/test_attention.py -p no:cacheprovider \
    -k "sanitizer and auto and racecheck" > "$RES/racecheck.txt" 2>&1 &
  RC=$!
  timeout 40 python3 -m pytest -q -m gpu tests/test_attention.py -p no:cacheprovider \
    -k "not sanitizer" > "$RES/pytest.txt" 2>&1; echo "pytest rc $? t=$(el)"
  tail -1 "$RES/pytest.txt"
  wait $MC; echo "memcheck rc $? t=$(el)"
  grep -E "PASS|FAIL|passed|failed" "$RES/memcheck.txt" | tail -2
  wait $RC; echo "racecheck rc $? t=$(el)"
  grep -E "PASS|FAIL|passed|failed" "$RES/racecheck.txt" | tail -2
  cd /tmp
  lim=$(( 79 - $(el) ))
  fam() { local f=$1; shift; local o=$f; for s in "$@"; do o="$o,${f}_$s"; done; echo $o; }
  PYTHONPATH="$SITE" timeout $lim python3 $W/sweep.py "$RES/sweep.json" 3 \
    64:c:512,1024:$(fam fa3_d64_defer e0 nd e8),fa3_d64,fa3_d64_u \
    64:f:512,1024:$(fam fa3_d64_m192 e0 nd e3),fa3_d64_defer,fa3_d64_defer_e0 \
    128:f:512:$(fam fa3_d128 e0 e8),fa3_d128_defer \
    128:c:512:$(fam fa3_d128_defer e0),fa3_d128 \
    256:f:512:$(fam fa3_d256 e0 e4) \
    64:cf:2048,4096:$(fam fa3_d64_m192 e0 nd e3) \
    64:c:8192:$(fam fa3_d64_m192 e0 nd) \
    128:cf:8192,16384:$(fam fa3_d128_n176 e0) \
    128:f:1024,2048,4096:$(fam fa3_d128 e0 e8) \
    64:cf:16384:$(fam fa3_d64_m192 e0 nd) \
    64:f:8192:$(fam fa3_d64_m192 e0 nd) \
    128:c:1024,2048,4096:$(fam fa3_d128 e0) \
    256:f:1024,2048,4096:$(fam fa3_d256 e0) \
    256:c:512,1024,2048,4096:$(fam fa3_d256 e0) \
    256:cf:8192,16384:$(fam fa3_d256_n80 e0) \
    > "$RES/sweep.txt" 2>&1; echo "sweep rc $? t=$(el)"
  tail -1 "$RES/sweep.txt"
  cat > $W/pipes.py <<'PYEOF'
"""Microbenchmark: do MUFU.EX2 and F2FP.BF16.F32.PACK_AB share an issue pipe on this GPU?
Times loops of each alone and both interleaved (independent chains, many warps)."""
import cupy as cp, time
src = r'''
extern "C" __global__ void k(float* out, int iters, int mode) {
  float a[8], b[8];
  unsigned p[8];
  for (int i = 0; i < 8; ++i) { a[i] = 0.5f + threadIdx.x * 1e-6f + i * 1e-3f; b[i] = a[i]; p[i] = 0; }
  for (int it = 0; it < iters; ++it) {
    if (mode & 1) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        float y; asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(a[i] - 1.0f)); a[i] = y;
      }
    }
    if (mode & 2) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        unsigned q; asm volatile("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(q) : "f"(b[i]), "f"(b[(i + 1) % 8]));
        p[i] ^= q; b[i] = __uint_as_float((q << 16) | 0x3f000000u);
      }
    }
  }
  float s = 0; for (int i = 0; i < 8; ++i) s += a[i] + b[i] + p[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
'''
m = cp.RawModule(code=src, options=("-arch=sm_90a",))
k = m.get_function("k")
sms = cp.cuda.Device().attributes["MultiProcessorCount"]
blocks, threads, iters = sms * 4, 512, 4096
out = cp.zeros(blocks * threads, cp.float32)
res = {}
for mode in (1, 2, 3, 1, 2, 3):
    k((blocks,), (threads,), (out, cp.int32(iters), cp.int32(mode)))
    cp.cuda.Device().synchronize()
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    e0.record(); k((blocks,), (threads,), (out, cp.int32(iters), cp.int32(mode))); e1.record(); e1.synchronize()
    ms = cp.cuda.get_elapsed_time(e0, e1)
    ops = blocks * threads * iters * 8
    res.setdefault(mode, []).append(ms)
for mode, v in res.items():
    ms = min(v)
    ops = blocks * threads * iters * 8
    print(f"mode {mode} ({['','ex2','cvt','ex2+cvt'][mode]}): {ms:.3f} ms, {ops / ms / 1e6 / sms / 1.98:.1f} per SM-clock of each op (at 1.98 GHz)")
PYEOF
  left=$(( 88 - $(el) )); [ $left -gt 5 ] && timeout $left python3 $W/pipes.py > "$RES/pipes.txt" 2>&1; echo "pipes rc $? t=$(el)"
  cat "$RES/pipes.txt" | tail -4
  cd "$TREE"
  ;;
esac
