#!/usr/bin/env bash
# integrator probe, round 3: DRAM / L2 traffic and clocks of ours beside the anchor (main's install), ncu.
set -u
case "$1" in
build) mkdir -p "$SITE" ;;
gpu)
  cd /tmp
  ROWS="fp8:8192x8192x8192,bf16:8192x8192x8192,fp8:1024x8192x8192,fp8:4096x4096x4096,bf16:4096x4096x4096,fp8:8192x14336x4096"
  PYTHONPATH=$BASE timeout 85 ncu --clock-control none --profile-from-start off \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__cycles_elapsed.avg.per_second,lts__t_bytes.sum \
    --csv python3 $OLDPWD/ncu_dram.py "$ROWS" > $RES/ncu.csv 2> $RES/ncu.err
  echo "ncu rc $?"; wc -l $RES/ncu.csv; tail -3 $RES/ncu.err
  ;;
esac
