#!/usr/bin/env bash
# gemm13 round 2: the 112 / 224-column tiles' tests (forced), then the forced tiles again hot and
# cool beside the anchor (one process each), with 4-stage 128 x 128 and 3-stage 128 x 224 probe
# variants (not for the repo) to see what the 224 tile's 4 stages cost.
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
  timeout 30 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_gemm_numerics.py -k "odd_width or every_wgmma" 2>&1 | tail -8 | tee "$RES/tests.txt"
  echo "tests done at $(( $(date +%s) - T0 )) s"
  cd /tmp/g13
  R="bf16:1024x14336x4096=wg_128x128+wg_128x224+wg_128x128s4+wg_128x224s3"
  R="$R,fp8fast:1024x14336x4096=wg_128x128+wg_128x224+wg_128x128s4"
  R="$R,bf16:128x14336x4096=wg_128x128+wg_128x112"
  R="$R,fp8:1024x14336x4096=wg_128x128+wg_128x224"
  R="$R,int8:1024x14336x4096=wg_128x128+wg_128x224"
  R="$R,fp8:128x14336x4096=wg_128x128+wg_128x112"
  timeout 40 python3 hot.py --rows "$R" --heat 0.4 --rounds 5 --budget 28 --json "$RES/hot2.json" 2>&1 | tee "$RES/hot2.txt"
  echo "hot done at $(( $(date +%s) - T0 )) s"
  C="bf16:1024x14336x4096=wg_128x128+wg_128x224,bf16:128x14336x4096=wg_128x128+wg_128x112"
  C="$C,fp8fast:1024x14336x4096=wg_128x128+wg_128x224"
  LEFT=$(( 87 - ($(date +%s) - T0) ))
  timeout $LEFT python3 hot.py --rows "$C" --heat 0 --idle 1.0 --rounds 3 --budget $(( LEFT - 14 )) --json "$RES/cool2.json" 2>&1 | tee "$RES/cool2.txt"
  echo "done at $(( $(date +%s) - T0 )) s"
  ;;
esac
