#!/usr/bin/env bash
# Session 13 recheck: the merged tree (.xchg/f13/full) and the base (.xchg/f13/base) in alternating
# fresh processes, 3 each: the GEMM rows the fp8 tile rule changed (+ controls) through hot.py
# (table only, hot, 3 rounds), then the attention rows the early exponentials changed (+ a control)
# beside cuDNN (att_pair.py, 4 alternating rounds).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install --no-deps --no-index -q --find-links .deps/wheels zstandard 2>&1 | grep -v "Running pip as"
R=$PWD/.xchg/f13
S=$PWD/.xchg/rc
W=/tmp/rc13; mkdir -p $W
cd /tmp
G="fp8:4096x4096x4096,fp8:8192x8192x8192,fp8:8192x4096x4096,fp8:8192x14336x4096,fp8:8192x4096x14336,fp8rowcol:4096x4096x4096,fp8rowcol:8192x8192x8192,fp8:1024x4096x14336,bf16:8192x8192x8192"
A="128:8192:c,128:8192:f,128:16384:c,64:512:c,64:1024:c,64:4096:c,64:8192:f,128:4096:c"
for i in 1 2 3; do
  for tree in full base; do
    PYTHONPATH=$R/$tree timeout 45 python3 $S/hot.py --rows "$G" --heat 0.4 --rounds 3 --json $W/g_${tree}_$i.json > $W/g_${tree}_$i.txt 2>&1
    PYTHONPATH=$R/$tree timeout 40 python3 $S/att_pair.py $W/a_${tree}_$i.json "$A" > $W/a_${tree}_$i.txt 2>&1
    echo "$i $tree done at $SECONDS s"
    tar -czf $OUT/rc13.tgz -C /tmp rc13
  done
done
