#!/bin/bash
# fp8m14 round 2: three register sets of promoted partials on wg_128x64 / wg_128x64k2 (changed in
# place: "table" is this build, "base" main's kernels), probes wg_128x64q (4 sets), wg_128x64r
# (3 sets, trips of 8), wg_128x128r (trips of 3); fp8 tests of the changed kernels.
phase=$1
if [ "$phase" = build ]; then
  cp -r xsite "$SITE"
  exit 0
fi
ROOT=$(pwd)
cd /tmp
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv > "$RES/env.txt" 2>&1
P="python3 $ROOT/probe/pair.py --base $BASE"
timeout 42 $P --rounds 6 --json "$RES/r2_default.json" --rows \
"fp8:1024x1024x1024=base+table+wg_128x64q+wg_128x64r,\
fp8:128x8192x8192=base+table+wg_128x64q+wg_128x64r,\
fp8:128x4096x14336=base+table,\
fp8:128x4096x8192=base+table,\
fp8:1024x1024x1024=base+table,\
fp8:128x8192x8192=base+table,\
fp8:128x14336x4096=base+wg_128x128r,\
fp8fast:1024x1024x1024=base+base/wg_64x128" 2>&1 | tee "$RES/r2_default.txt"
cd "$ROOT"
timeout 34 python3 -m pytest -q -p no:cacheprovider -x -m gpu tests/test_gemm_numerics.py \
  -k "two_level or (every_wgmma_tile_exact and float8) or fp8_matches or fp8_random or scaled_mm_exact" \
  2>&1 | tail -5 | tee "$RES/r2_tests.txt"
