#!/bin/bash
# fp8m14 round 1: promoted-loop register sets / trips on the small tiles (new variants beside
# the unchanged ones, and main's kernels through --base), and fast-mode / mid-shape tile probes.
phase=$1
if [ "$phase" = build ]; then
  cp -r xsite "$SITE"
  exit 0
fi
ROOT=$(pwd)
cd /tmp
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv > "$RES/env.txt" 2>&1
P="python3 $ROOT/probe/pair.py --base $BASE"
timeout 45 $P --rounds 4 --json "$RES/r1_default.json" --rows \
"fp8:16x4096x4096=base+table+wg_16x64tp+wg_16x64tq,\
fp8:16x8192x8192=base+wg_16x64tp+wg_16x64tq,\
fp8:16x14336x4096=base+wg_16x128tp,\
fp8:128x4096x4096=base+table+wg_64x64p,\
fp8:128x8192x8192=base+wg_128x64p,\
fp8:1024x1024x1024=base+wg_128x64p,\
fp8:1024x4096x4096=base+base/wg_128x128,\
fp8:1024x14336x4096=base+base/wg_128x128" 2>&1 | tee "$RES/r1_default.txt"
timeout 25 $P --rounds 3 --json "$RES/r1_fast.json" --rows \
"fp8fast:1024x14336x4096=base+base/wg_128x128,\
fp8fast:1024x8192x8192=base+base/wg_128x128,\
fp8fast:128x4096x4096=base+base/wg_128x64k2+base/wg_64x128,\
fp8fast:1024x1024x1024=base+base/wg_64x128+base/wg_128x128,\
fp8fast:16x4096x4096=base+base/wg_32x64t+base/wg_16x64tk2" 2>&1 | tee "$RES/r1_fast.txt"
