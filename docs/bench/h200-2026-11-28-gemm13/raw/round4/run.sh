#!/usr/bin/env bash
# gemm13 round 4 (final candidate: wg_128x224 for bf16 / f16, K-major b): the GEMM GPU suite
# (sanitizers included), then hot rows in one process of this build (the table beside main's pick
# wg_128x128 forced, and control rows) and the same rows in one process of $BASE (main).
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
  timeout 47 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_gemm_numerics.py tests/test_gemm_validation.py tests/test_gemm_swapped.py tests/test_gemm_splitk.py tests/test_gemm_batched.py tests/test_gemm_tiles.py 2>&1 | tail -12 | tee "$RES/tests.txt"
  echo "tests done at $(( $(date +%s) - T0 )) s"
  cd /tmp/g13
  R="bf16:1024x14336x4096=wg_128x128,bf16:1024x4096x4096,fp8:1024x14336x4096,bf16:128x14336x4096,bf16:1024x14336x4096:kn,bf16:1024x14336x4096=wg_128x128"
  timeout 21 python3 hot.py --rows "$R" --heat 0.4 --rounds 4 --budget 14 --json "$RES/hot4_new.json" 2>&1 | tee "$RES/hot4_new.txt"
  echo "new done at $(( $(date +%s) - T0 )) s"
  LEFT=$(( 87 - ($(date +%s) - T0) ))
  PYTHONPATH="$BASE" timeout $LEFT python3 hot.py --rows "$R" --heat 0.4 --rounds 4 --budget $(( LEFT - 8 )) --json "$RES/hot4_base.json" 2>&1 | tee "$RES/hot4_base.txt"
  echo "done at $(( $(date +%s) - T0 )) s"
  ;;
esac
