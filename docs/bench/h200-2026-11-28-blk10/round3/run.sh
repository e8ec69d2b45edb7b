#!/bin/bash
# blk10 final round: block scales through per-warp cp.async rings in shared memory (two K blocks
# ahead, warp-level sync), the paired drain loop on part-wide tiles. Tests first, then the fp8
# bench (quick) new vs $BASE, then the forced block sweep (new).
set -u
phase=$1
if [ "$phase" = build ]; then
  cp -r xsite "$SITE"
  exit 0
fi
ROOT=$(pwd)
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
echo "== tests"
timeout 20 python3 -m pytest -q -x -m gpu tests/test_gemm_numerics.py \
  -k "wgmma and (scaled_mm or fp8) or every_wgmma_tile or cluster_tiles" 2>&1 | tail -3
timeout 14 python3 -m pytest -q -x -m gpu tests/test_gemm_splitk.py tests/test_gemm_tiles.py tests/test_gemm_batched.py -k "not sanitizer" 2>&1 | tail -3
cd /tmp
echo "== bench new"
timeout 17 python3 -m aotkernels.cli bench gemm --dtypes fp8 --quick --reps 20 --json "$RES/bench-new.json" 2>&1 | tail -14
echo "== bench base"
PYTHONPATH="$BASE" timeout 17 python3 -m aotkernels.cli bench gemm --dtypes fp8 --quick --reps 20 --json "$RES/bench-base.json" 2>&1 | tail -14
echo "== sweep new"
timeout 12 python3 "$ROOT/tools/gemm_sweep.py" --dtypes fp8block --shapes 4096x4096x4096,8192x8192x8192 \
  --variants wg_128x128,wg_128x256,wg_128x256c2 --reps 20 --json "$RES/sweep-new.json" 2>&1 | tail -3
