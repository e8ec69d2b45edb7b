#!/usr/bin/env bash
# gemm13 round 1: the GEMM GPU suite (the 112 / 224-column tiles forced among every wgmma tile),
# then a hot probe of them beside the tiles they replace and the anchor, in one process.
set -u
case "$1" in
build)
  cp -r xsite "$SITE"
  ;;
gpu)
  T0=$(date +%s)
  export PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader
  mkdir -p /tmp/g13
  # (docs/bench/h200-2026-11-28-session12/raw/hot.py written to /tmp/g13/hot.py)
  timeout 48 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_gemm_numerics.py tests/test_gemm_validation.py tests/test_gemm_swapped.py tests/test_gemm_splitk.py tests/test_gemm_batched.py tests/test_gemm_tiles.py 2>&1 | tail -12 | tee "$RES/tests.txt"
  echo "tests done at $(( $(date +%s) - T0 )) s"
  cd /tmp/g13
  R="bf16:1024x14336x4096=wg_128x128+wg_128x224+wg_128x256"
  R="$R,fp8:1024x14336x4096=wg_128x128+wg_128x224"
  R="$R,bf16:128x14336x4096=wg_128x128+wg_128x112"
  R="$R,fp8:128x14336x4096=wg_128x128+wg_128x112"
  R="$R,int8:1024x14336x4096=wg_128x128+wg_128x224"
  R="$R,int8:128x14336x4096=wg_128x128+wg_128x112"
  R="$R,fp8fast:1024x14336x4096=wg_128x128+wg_128x224"
  R="$R,fp8fast:128x14336x4096=wg_128x128+wg_128x112"
  LEFT=$(( 87 - ($(date +%s) - T0) ))
  timeout $LEFT python3 hot.py --rows "$R" --heat 0.4 --rounds 4 --budget $(( LEFT - 12 )) --json "$RES/hot1.json" 2>&1 | tee "$RES/hot1.txt"
  echo "done at $(( $(date +%s) - T0 )) s"
  ;;
esac
