#!/bin/bash
# blk14 round 2b: ncu (clocks free) on main's install: fp8 4096^3 block scales on 128x128 and
# 128x256 tiles, per-tensor on 128x128: warp stall reasons and per-instruction stall samples.
set -u
if [ "$1" = build ]; then cp -r xsite "$SITE"; exit 0; fi
SRC=$PWD
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
cd $SRC/probe_blk14
for spec in "fp8block:4096x4096x4096 wg_128x128 blk128" "fp8:4096x4096x4096 wg_128x128 ten128" \
            "fp8block:4096x4096x4096 wg_128x256 blk256"; do
  set -- $spec
  s=$SECONDS
  PYTHONPATH=$BASE timeout 22 ncu --clock-control none -k regex:ak_scaled_mm --launch-skip 3 \
    --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SourceCounters \
    -o $RES/$3 python3 ncu_one.py $1 $2 > $RES/$3.log 2>&1
  echo "$3 rc $? $((SECONDS - s)) s"
  ncu -i $RES/$3.ncu-rep --page details > $RES/$3_details.txt 2>&1
  ncu -i $RES/$3.ncu-rep --page source --print-source sass --csv > $RES/$3_sass.csv 2>&1
  gzip -f $RES/$3_sass.csv
  ls -la $RES/$3*
done
