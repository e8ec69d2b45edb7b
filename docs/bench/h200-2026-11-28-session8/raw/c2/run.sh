#!/usr/bin/env bash
# integrator: is the 2-CTA cluster tile faster where it looked faster (fp8 block, int8, 8192^3)?
case "$1" in
build) true ;;
gpu)
  export PYTHONPATH="$BASE"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  for r in 1 2 3; do
    if [ $((r % 2)) = 1 ]; then V=wg_128x256,wg_128x256c2; else V=wg_128x256c2,wg_128x256; fi
    timeout 40 python3 tools/gemm_sweep.py --dtypes fp8block,int8 --shapes 4096x4096x4096,8192x8192x8192 \
      --variants $V --reps 40 --json $RES/sweep$r.json
  done
  nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv
  ;;
esac
