#!/usr/bin/env bash
# integrator probe, round 4: fp8 (two-level accumulation) on 128 x 128 tiles (promotion of one
# stage overlapping the next stage's wgmmas) against 128 x 256 (each 128-column part drained
# before its promotion), main's install: ncu cycles, then a hot probe beside the anchor.
set -u
case "$1" in
build) mkdir -p "$SITE" ;;
gpu)
  S=$PWD
  cd /tmp
  C="wg_128x128+wg_128x256"
  ROWS="fp8:8192x8192x8192:$C,fp8fast:8192x8192x8192:$C,fp8:1024x8192x8192:$C,fp8:8192x14336x4096:$C"
  PYTHONPATH=$BASE timeout 30 ncu --clock-control none --profile-from-start off \
    --metrics gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_elapsed.avg.per_second,dram__bytes_read.sum \
    --csv python3 $S/ncu_force.py "$ROWS" > $RES/ncu4.csv 2> $RES/ncu4.err
  echo "ncu rc $?"; tail -2 $RES/ncu4.err
  H=$S/hot.py
  R=""
  for s in 4096x4096x4096 8192x8192x8192 8192x4096x4096 8192x14336x4096 8192x4096x14336 1024x8192x8192 1024x4096x14336 2048x2048x2048; do R="$R,fp8:$s=$C"; done
  R="$R,fp8fast:8192x8192x8192=$C,fp8fast:4096x4096x4096=$C,fp8rowcol:8192x8192x8192=$C"
  PYTHONPATH=$BASE timeout 55 python3 $H --rows "${R#,}" --heat 0.4 --rounds 5 --budget 48 --json $RES/hot4.json 2>&1 | tee $RES/hot4.txt
  ;;
esac
