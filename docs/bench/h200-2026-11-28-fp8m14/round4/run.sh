#!/bin/bash
# fp8m14 final candidate: wg_128x64 with three register sets of promoted partials, and fast fp8
# taking wg_64x128 where the tiles are few. The GEMM GPU suite (sanitizers included), then hot
# paired rows: "table" this build, "base" main's kernels under this table, "base/<v>" main's
# kernels with <v> forced (main's pick for the fast rows).
phase=$1
if [ "$phase" = build ]; then
  cp -r xsite "$SITE"
  exit 0
fi
T0=$(date +%s)
ROOT=$(pwd)
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv > "$RES/env.txt" 2>&1
timeout 46 python3 -m pytest -q -p no:cacheprovider -rfEs -m gpu tests/test_gemm_numerics.py \
  tests/test_gemm_validation.py tests/test_gemm_swapped.py tests/test_gemm_splitk.py \
  tests/test_gemm_batched.py tests/test_gemm_tiles.py 2>&1 | tail -12 | tee "$RES/tests.txt"
echo "tests done at $(( $(date +%s) - T0 )) s"
cd /tmp
LEFT=$(( 77 - ($(date +%s) - T0) ))
timeout $LEFT python3 "$ROOT/probe/pair.py" --base "$BASE" --rounds 4 --budget $(( LEFT - 6 )) \
  --json "$RES/r4_pair.json" --rows \
"fp8:1024x1024x1024=base+table,\
fp8:128x8192x8192=base+table,\
fp8fast:1024x1024x1024=base/wg_128x64+table,\
fp8fast:128x8192x8192=base/wg_128x64+table,\
fp8:2048x1024x1024=base+table,\
fp8:16x4096x4096=base+table,\
fp8:128x4096x4096=base+table,\
int8:1024x1024x1024=base+table" 2>&1 | tee "$RES/r4_pair.txt"
echo "done at $(( $(date +%s) - T0 )) s"
