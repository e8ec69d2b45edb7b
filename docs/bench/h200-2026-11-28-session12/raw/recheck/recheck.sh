#!/usr/bin/env bash
# Re-measure the rows the K-split rules changed (and one unchanged control, fp8 128x4096x4096):
# fresh processes, the merged tree and the base alternated, 4 of each; each process runs hot.py
# (0.3 s of 8192^3 bf16 matmuls before each of 2 rounds, ours and the anchor alternated).
set -u
python3 -m pip install --no-deps --no-index -q --find-links .deps/wheels zstandard 2>&1 | grep -v "Running pip as"
X=$PWD/.xchg; R=/tmp/res; mkdir -p $R; cd /tmp
ROWS="bf16:16x4096x14336,bf16:16x4096x14336:kn,fp8:16x4096x14336,fp8fast:16x4096x14336,int8:32x4096x14336,bf16:128x4096x4096,bf16:128x4096x4096:kn,bf16:128x4096x14336,bf16:128x4096x14336:kn,fp8:128x4096x14336,int8:128x4096x14336,fp8:128x4096x4096"
for r in 1 2 3 4; do
  for cfg in full base; do
    PYTHONPATH=$X/f12/$cfg timeout 40 python3 $X/hot.py --rows "$ROWS" --heat 0.3 --rounds 2 --reps 20 \
      --json $R/ab_${cfg/full/new}_$r.json > $R/ab_${cfg/full/new}_$r.txt 2>&1
    echo "$cfg $r rc=$?"
  done
done
python3 $X/abs.py $R > $R/ab_summary.txt 2>&1; cat $R/ab_summary.txt
tar -czf $OUT/recheck.tgz -C /tmp res
