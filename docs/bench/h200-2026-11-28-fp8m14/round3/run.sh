#!/bin/bash
# fp8m14 round 3 candidate: wg_128x64 with three register sets of promoted partials (everything
# else main's). The GEMM GPU suite (sanitizers included), then hot paired rows: "table" this
# build, "base" main's kernels (same table code), probes of the other tiles at middle rows.
phase=$1
if [ "$phase" = build ]; then
  cp -r xsite "$SITE"
  exit 0
fi
T0=$(date +%s)
ROOT=$(pwd)
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv > "$RES/env.txt" 2>&1
timeout 46 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_gemm_numerics.py \
  tests/test_gemm_validation.py tests/test_gemm_swapped.py tests/test_gemm_splitk.py \
  tests/test_gemm_batched.py tests/test_gemm_tiles.py 2>&1 | tail -12 | tee "$RES/tests.txt"
echo "tests done at $(( $(date +%s) - T0 )) s"
cd /tmp
LEFT=$(( 77 - ($(date +%s) - T0) ))
timeout $LEFT python3 "$ROOT/probe/pair.py" --base "$BASE" --rounds 4 --budget $(( LEFT - 6 )) \
  --json "$RES/r3_pair.json" --rows \
"fp8:1024x1024x1024=base+table,\
fp8:128x8192x8192=base+table,\
fp8:2048x1024x1024=base+table,\
fp8:128x4096x14336=base+table,\
fp8fast:128x8192x8192=base+base/wg_64x128,\
fp8fast:1024x1024x1024=base+base/wg_64x128,\
fp8:1024x4096x4096=base+wg_128x64,\
fp8:2048x2048x2048=base+wg_128x64,\
int8:1024x1024x1024=base+table" 2>&1 | tee "$RES/r3_pair.txt"
echo "done at $(( $(date +%s) - T0 )) s"
