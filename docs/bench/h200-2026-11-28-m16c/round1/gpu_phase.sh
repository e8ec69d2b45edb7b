start=$(date +%s)
el() { echo "[t+$(( $(date +%s) - start ))s] $*"; }
el "tests swapped (tc2)"
timeout 24 python3 -m pytest -q -x -p no:cacheprovider tests/test_gemm_swapped.py -k "tc2" \
  > "$RES/test_swapped_tc2.txt" 2>&1; echo "rc=$?" >> "$RES/test_swapped_tc2.txt"
tail -3 "$RES/test_swapped_tc2.txt"
el "numerics every tile"
timeout 14 python3 -m pytest -q -m gpu --maxfail=5 -p no:cacheprovider tests/test_gemm_numerics.py \
  -k "every_wgmma_tile" > "$RES/test_numerics.txt" 2>&1; echo "rc=$?" >> "$RES/test_numerics.txt"
tail -3 "$RES/test_numerics.txt"
cd /tmp
R="fp8:16x4096x4096=wg_8x64tc2+wg_16x64tc2,bf16:16x4096x4096=wg_8x64tc2,fp8:32x4096x4096=wg_16x64tc2"
R="$R,fp8:16x8192x8192=wg_8x64tc2,fp8:16x4096x14336=wg_8x64tc2,bf16:16x4096x14336=wg_8x64tc2"
R="$R,bf16:16x4096x14336:kn=wg_8x64tc2,bf16:16x8192x8192=wg_8x64tc2,fp8:16x14336x4096=wg_8x64tc2"
R="$R,int8:32x4096x4096=wg_16x64tc2,bf16:32x4096x4096=wg_16x64tc2,bf16:16x2048x4096=wg_8x64tc2+wg_16x64t"
R="$R,fp8:16x2048x4096=wg_8x64tc2+wg_16x64t,bf16:16x14336x4096=wg_8x64tc2"
left=$(( 70 - ($(date +%s) - start) ))
el "drive (limit $left)"
timeout $left python3 $T/drive.py --rows "$R" --rounds 3 --reps 20 --budget $(( left - 6 )) \
  --json "$RES/drive.json" > "$RES/drive.txt" 2>&1
cat "$RES/drive.txt"
left=$(( 88 - ($(date +%s) - start) ))
el "ncu (limit $left)"
timeout $left ncu --clock-control none --kernel-name regex:'tc2|wg_16x64t_|nvjet' \
  --section SpeedOfLight --section LaunchStats --section WarpStateStats \
  --metrics dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
  python3 $T/probe.py "fp8:16x4096x4096=wg_8x64tc2" > "$RES/ncu.txt" 2>&1
grep -E "Profiling|Duration|DRAM Through|Memory Through" "$RES/ncu.txt" | head -20
el "end"
