#!/usr/bin/env bash
# Call 4: wg_128x128k2 (128 x 128 tiles, K split by a 2-CTA cluster) against the table at M = 128,
# N = 8192 (and a few more), hot and cool.
set -u
export PYTHONUNBUFFERED=1
R=$PWD
W=/tmp/p4; mkdir -p $W
python3 -m pip install --no-deps --no-index -q --find-links .deps/wheels zstandard 2>&1 | grep -v "Running pip as"
cp -r .xchg/probe/xsite /tmp/psite
cd /tmp
export PYTHONPATH=/tmp/psite
H=$R/.xchg/probe/hot.py
C="wg_128x128k2+wg_64x128+wg_128x64+wg_128x128"
ROWS="bf16:128x8192x8192,bf16:128x8192x8192:kn,fp8:128x8192x8192,int8:128x8192x8192,bf16:128x8192x4096,bf16:128x6144x4096,fp8:128x8192x4096,bf16:1024x1024x1024,fp8:1024x1024x1024,bf16:128x8192x14336"
timeout 100 python3 $H --rows "$ROWS" --cands $C --heat 0.4 --json $W/hot.json > $W/hot.txt 2>&1; cat $W/hot.txt
timeout 80 python3 $H --rows "$ROWS" --cands $C --heat 0 --idle 1.0 --rounds 3 --json $W/cool.json > $W/cool.txt 2>&1; cat $W/cool.txt
tar -czf $OUT/p4.tgz -C /tmp p4
