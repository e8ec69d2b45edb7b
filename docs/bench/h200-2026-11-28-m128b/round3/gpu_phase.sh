start=$(date +%s)
el() { echo "[t+$(( $(date +%s) - start ))s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader
python3 -c "import json,sys; f=json.load(open(sys.argv[1]))['families']['gemm']; print('new gemm entries', len(f['entries']), [(i['target'], i['bytes']) for i in f['images']])" "$SITE/aotkernels/kernels/manifest.json"
el "tests"
timeout 38 python3 -m pytest -q -m gpu -rf --maxfail=12 -p no:cacheprovider \
  tests/test_gemm_numerics.py tests/test_gemm_tiles.py > "$RES/test_gemm.txt" 2>&1; echo "rc=$?" >> "$RES/test_gemm.txt"
tail -3 "$RES/test_gemm.txt"
el "tests 2"
timeout 22 python3 -m pytest -q -m gpu -rf --maxfail=12 -p no:cacheprovider \
  tests/test_gemm_swapped.py tests/test_gemm_splitk.py tests/test_gemm_batched.py > "$RES/test_gemm_more.txt" 2>&1; echo "rc=$?" >> "$RES/test_gemm_more.txt"
tail -3 "$RES/test_gemm_more.txt"
cd /tmp
AB="fp8:128x4096x4096,fp8:128x4096x14336,fp8:128x8192x8192,fp8:1024x1024x1024,fp8:128x14336x4096"
AB="$AB,bf16:128x4096x4096,fp8:64x4096x14336,fp8:2048x2048x2048"
ABN="$AB=wg_128x128"
ab() {  # ab <cfg> <r>
  left=$(( 86 - ($(date +%s) - start) ))
  [ $left -lt 11 ] && return 1
  el "ab $1 $2"
  if [ $1 = new ]; then PP="$SITE"; R="$ABN"; else PP="$BASE"; R="$AB"; fi
  D=""; [ $2 = 1 ] && D="--dump /tmp/out_$1.pt"
  PYTHONPATH="$PP" timeout $(( left < 18 ? left : 18 )) python3 $T/drive.py --rows "$R" --rounds 2 --budget 11 \
    --reps 20 --json "$RES/ab_${1}_$2.json" $D > "$RES/ab_${1}_$2.txt" 2>&1
  tail -8 "$RES/ab_${1}_$2.txt"
}
ab new 1; ab base 1; ab new 2; ab base 2; ab new 3; ab base 3
el "sum"
timeout 6 python3 $T/absum.py "$RES" /tmp > "$RES/ab_summary.txt" 2>&1
cat "$RES/ab_summary.txt"
el "end"
