#!/usr/bin/env bash
# gemm13 round 3: the 224-column tiles' tests (forced), then bf16 1024x14336x4096 on 128 x 128,
# 128 x 224 (4 stages, TMA-store epilogue) and 128 x 224 with register stores (5 stages), hot
# (4 repeats of the row) and cool (2), beside the anchor, one process each.
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
  X="bf16:1024x14336x4096=wg_128x128+wg_128x224+wg_128x224r"
  timeout 36 python3 hot.py --rows "$X,$X,$X,$X" --heat 0.4 --rounds 4 --budget 26 --json "$RES/hot3.json" 2>&1 | tee "$RES/hot3.txt"
  echo "hot done at $(( $(date +%s) - T0 )) s"
  LEFT=$(( 87 - ($(date +%s) - T0) ))
  timeout $LEFT python3 hot.py --rows "$X,$X" --heat 0 --idle 1.0 --rounds 3 --budget $(( LEFT - 14 )) --json "$RES/cool3.json" 2>&1 | tee "$RES/cool3.txt"
  echo "done at $(( $(date +%s) - T0 )) s"
  ;;
esac
