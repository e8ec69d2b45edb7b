#!/bin/bash
# fp8m14 last round: the committed candidate (920945c, the same build as round 4). The GEMM GPU
# suite (sanitizers included), then hot paired rows: the bench rows it changes again, and other
# shapes the changed picks reach (wg_128x64 promoted, wg_64x128 for fast fp8 where tiles are few).
phase=$1
if [ "$phase" = build ]; then
  cp -r xsite "$SITE"
  exit 0
fi
T0=$(date +%s)
ROOT=$(pwd)
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv > "$RES/env.txt" 2>&1
timeout 44 python3 -m pytest -q -p no:cacheprovider -rfEs -m gpu tests/test_gemm_numerics.py \
  tests/test_gemm_validation.py tests/test_gemm_swapped.py tests/test_gemm_splitk.py \
  tests/test_gemm_batched.py tests/test_gemm_tiles.py 2>&1 | tail -12 | tee "$RES/tests.txt"
echo "tests done at $(( $(date +%s) - T0 )) s"
cd /tmp
LEFT=$(( 78 - ($(date +%s) - T0) ))
timeout $LEFT python3 "$ROOT/probe/pair.py" --base "$BASE" --rounds 4 --budget $(( LEFT - 5 )) \
  --json "$RES/r5_pair.json" --rows \
"fp8:1024x1024x1024=base+table,\
fp8fast:1024x1024x1024=base/wg_128x64+table,\
fp8:128x8192x8192=base+table,\
fp8fast:128x8192x8192=base/wg_128x64+table,\
fp8:512x2048x4096=base+table,\
fp8fast:512x2048x4096=base/wg_128x64+table,\
fp8:128x6144x4096=base+table,\
fp8fast:128x6144x4096=base/wg_128x64+table,\
fp8:256x1024x8192=base+table,\
fp8fast:256x1024x8192=base/wg_128x64+table" 2>&1 | tee "$RES/r5_pair.txt"
echo "done at $(( $(date +%s) - T0 )) s"
