start=$(date +%s)
el() { echo "[t+$(( $(date +%s) - start ))s] $*"; }
el "tests"
timeout 32 python3 -m pytest -q -m gpu --maxfail=5 -p no:cacheprovider tests/test_gemm_numerics.py \
  tests/test_gemm_tiles.py > "$RES/test_gemm.txt" 2>&1; echo "rc=$?" >> "$RES/test_gemm.txt"
tail -3 "$RES/test_gemm.txt"
cd /tmp
AB="fp8:128x4096x4096,fp8:128x4096x14336,fp8:128x8192x8192,fp8:128x14336x4096,bf16:128x4096x4096:kn"
AB="$AB,bf16:128x4096x14336:kn,bf16:128x8192x8192,fp8:1024x1024x1024,bf16:1024x1024x1024"
AB="$AB,fp8:2048x2048x2048,bf16:4096x4096x4096,fp8:16x4096x4096"
for r in 1 2 3; do
  for cfg in new base; do
    left=$(( 84 - ($(date +%s) - start) ))
    [ $left -lt 11 ] && break 2
    el "ab $cfg $r"
    if [ $cfg = new ]; then PP="$SITE"; else PP="$BASE"; fi
    D=""; [ $r = 1 ] && D="--dump /tmp/out_$cfg.pt"
    PYTHONPATH="$PP" timeout $(( left < 20 ? left : 20 )) python3 $T/drive.py --rows "$AB" --rounds 3 \
      --reps 20 --json "$RES/ab_${cfg}_$r.json" $D > "$RES/ab_${cfg}_$r.txt" 2>&1
  done
done
el "sum"
timeout 6 python3 $T/absum.py "$RES" /tmp > "$RES/ab_summary.txt" 2>&1
cat "$RES/ab_summary.txt"
el "end"
