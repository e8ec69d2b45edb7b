#!/usr/bin/env bash
# Re-measure the rows whose bench ratio moved most in the final call: fresh processes, the merged
# tree and the base alternated, each process pairing ours with the anchor. .xchg/t/ held
# drive.py and absum.py of ../../../h200-2026-11-28-smallm10/ (unchanged); .xchg/full and
# .xchg/base the two installs of the final call.
set -u
python3 -m pip install --no-deps --no-index -q --find-links .deps/wheels zstandard 2>&1 | grep -v "Running pip as"
X=$PWD/.xchg; R=/tmp/res; mkdir -p $R; cd /tmp
ROWS="bf16:16x4096x14336,bf16:16x4096x14336:kn,bf16:16x4096x4096:kn,fp8:16x8192x8192,fp8:128x4096x14336,fp8:128x4096x4096,bf16:1024x14336x4096"
for r in 1 2 3 4; do
  for cfg in full base; do
    PYTHONPATH=$X/$cfg timeout 30 python3 $X/t/drive.py --rows "$ROWS" --rounds 2 --reps 20 \
      --json $R/ab_${cfg/full/new}_$r.json > $R/ab_${cfg/full/new}_$r.txt 2>&1
    echo "$cfg $r rc=$?"
  done
done
python3 $X/t/absum.py $R /tmp > $R/ab_summary.txt 2>&1; cat $R/ab_summary.txt
tar -czf $OUT/recheck.tgz -C /tmp res
