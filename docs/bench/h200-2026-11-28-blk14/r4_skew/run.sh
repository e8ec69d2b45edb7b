#!/bin/bash
# blk14 round 3 (skew). Candidate: on 128x128 promoted fp8 tiles the second consumer warpgroup
# starts 4 stages after the first (a named barrier), so their epilogues no longer coincide.
# Tests first, then candidate and main's install in fresh processes alternated (hot probe).
set -u
if [ "$1" = build ]; then cp -r xsite "$SITE"; exit 0; fi
SRC=$PWD
HOT=$SRC/probe_blk14/hot.py
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
s=$SECONDS
timeout 16 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gemm_numerics.py \
  -k "every_wgmma_tile or two_level or sm90a_image" 2>&1 | tail -3
echo "tests $((SECONDS - s)) s"
cd /tmp
ROWS="fp8:4096x4096x4096,fp8:8192x4096x4096,fp8:8192x8192x8192"
ROWS="$ROWS,fp8rowcol:4096x4096x4096,fp8rowcol:8192x8192x8192,fp8block:4096x4096x4096=wg_128x128"
for i in 1 2; do
  for t in new base; do
    s=$SECONDS
    if [ $t = new ]; then P=$SITE; else P=$BASE; fi
    echo "== $t $i"
    PYTHONPATH=$P timeout 15 python3 $HOT --rounds 3 --heat 0.3 --json $RES/pair_${t}_$i.json \
      --rows "$ROWS" 2>&1 | grep -v Warning
    echo "$t $i $((SECONDS - s)) s"
  done
done
