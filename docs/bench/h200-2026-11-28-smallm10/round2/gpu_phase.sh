start=$(date +%s)
el() { echo "[t+$(( $(date +%s) - start ))s] $*"; }
el "tests"
timeout 28 python3 -m pytest -q -x -p no:cacheprovider tests/test_gemm_swapped.py \
  > "$RES/test_swapped.txt" 2>&1; echo "rc=$?" >> "$RES/test_swapped.txt"
tail -2 "$RES/test_swapped.txt"
el "numerics"
timeout 20 python3 -m pytest -q -x -p no:cacheprovider tests/test_gemm_numerics.py \
  -k "every_wgmma_tile" > "$RES/test_numerics.txt" 2>&1; echo "rc=$?" >> "$RES/test_numerics.txt"
tail -2 "$RES/test_numerics.txt"
cd /tmp
AB="fp8:16x4096x4096=wg_16x64tk2,fp8:16x4096x14336,fp8:16x8192x8192,fp8:16x14336x4096,fp8:32x4096x4096"
AB="$AB,int8:32x4096x4096,bf16:16x4096x4096,bf16:16x8192x8192,fp8:128x4096x4096,fp8:1024x1024x1024"
AB="$AB,bf16:1024x1024x1024"
for r in 1 2 3; do
  for cfg in new base; do
    left=$(( 112 - ($(date +%s) - start) ))
    [ $left -lt 12 ] && break 2
    el "ab $cfg $r"
    if [ $cfg = new ]; then PP="$SITE"; else PP="$BASE"; fi
    D=""; [ $r = 1 ] && D="--dump /tmp/out_$cfg.pt"
    PYTHONPATH="$PP" timeout $(( left < 25 ? left : 25 )) python3 $T/drive.py --rows "$AB" --rounds 3 \
      --reps 20 --json "$RES/ab_${cfg}_$r.json" $D > "$RES/ab_${cfg}_$r.txt" 2>&1
  done
done
el "sum"
python3 $T/absum.py "$RES" /tmp > "$RES/ab_summary.txt" 2>&1
cat "$RES/ab_summary.txt"
el "end"
