start=$(date +%s)
el() { echo "[t+$(( $(date +%s) - start ))s] $*"; }
el "tests swapped"
timeout 20 python3 -m pytest -q -x -p no:cacheprovider tests/test_gemm_swapped.py \
  > "$RES/test_swapped.txt" 2>&1; echo "rc=$?" >> "$RES/test_swapped.txt"
tail -3 "$RES/test_swapped.txt"
el "numerics + tiles"
timeout 36 python3 -m pytest -q -m gpu --maxfail=5 -p no:cacheprovider tests/test_gemm_numerics.py \
  tests/test_gemm_tiles.py > "$RES/test_gemm.txt" 2>&1; echo "rc=$?" >> "$RES/test_gemm.txt"
tail -3 "$RES/test_gemm.txt"
cd /tmp
AB="fp8:16x4096x4096,fp8:16x4096x14336,fp8:16x8192x8192,fp8:16x14336x4096,fp8:32x4096x4096"
AB="$AB,bf16:16x4096x4096,bf16:16x8192x8192,bf16:16x14336x4096,bf16:16x4096x14336"
AB="$AB,bf16:16x4096x14336:kn,int8:32x4096x4096,bf16:16x2048x4096,fp8:128x4096x4096"
AB="$AB,fp8:1024x1024x1024,bf16:1024x1024x1024"
for r in 1 2 3; do
  for cfg in new base; do
    left=$(( 81 - ($(date +%s) - start) ))
    [ $left -lt 7 ] && break 2
    el "ab $cfg $r"
    if [ $cfg = new ]; then PP="$SITE"; else PP="$BASE"; fi
    D=""; [ $r = 1 ] && D="--dump /tmp/out_$cfg.pt"
    PYTHONPATH="$PP" timeout $(( left < 14 ? left : 14 )) python3 $T/drive.py --rows "$AB" --rounds 2 \
      --reps 20 --json "$RES/ab_${cfg}_$r.json" $D > "$RES/ab_${cfg}_$r.txt" 2>&1
  done
done
el "sum"
timeout 8 python3 $T/absum.py "$RES" /tmp > "$RES/ab_summary.txt" 2>&1
cat "$RES/ab_summary.txt"
el "end"
