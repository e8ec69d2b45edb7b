#!/usr/bin/env bash
# Session 14 recheck: the merged tree (.xchg/f14/full) and the base (.xchg/f14/base) in alternating
# fresh processes, 3 each: the GEMM rows fp8m14 and blk14 changed (+ controls) through hot.py
# (table only, hot, 3 rounds), then the attention rows attn14 and attn14b changed (+ a control)
# beside cuDNN (att_pair.py, 4 alternating rounds).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install --no-deps --no-index -q --find-links .deps/wheels zstandard 2>&1 | grep -v "Running pip as"
R=$PWD/.xchg/f14
S=$PWD/.xchg/rc
W=/tmp/rc14; mkdir -p $W
cd /tmp
G="fp8:1024x1024x1024,fp8:128x8192x8192,fp8fast:1024x1024x1024,fp8fast:128x8192x8192,fp8rowcol:4096x4096x4096,fp8rowcol:8192x8192x8192,fp8:16x4096x4096,int8:1024x1024x1024"
A="64:512:f,64:1024:f,64:2048:c,64:4096:c,128:512:c,256:512:c,256:1024:c,128:4096:f"
for i in 1 2 3; do
  for tree in full base; do
    PYTHONPATH=$R/$tree timeout 35 python3 $S/hot.py --rows "$G" --heat 0.4 --rounds 3 --json $W/g_${tree}_$i.json > $W/g_${tree}_$i.txt 2>&1
    PYTHONPATH=$R/$tree timeout 30 python3 $S/att_pair.py $W/a_${tree}_$i.json "$A" > $W/a_${tree}_$i.txt 2>&1
    echo "$i $tree done at $SECONDS s"
    tar -czf $OUT/rc14.tgz -C /tmp rc14
  done
done
