# The gpu phase of this round's run.sh: round1/run.sh with this body in place of its own (the same
# embedded sweep.py / prof.py / top.py).
  # Round 4 (last): no candidate; ncu of main's kernels ($BASE) and cuDNN at two shapes.
  cd /tmp
  NCU="ncu --clock-control none --profile-from-start off --set full --import-source no -c 1"
  for spec in "ours 64 1024 1" "cudnn 64 1024 1" "ours 128 1024 0" "cudnn 128 1024 0"; do
    tag=$(echo $spec | tr ' ' _)
    lim=$(( 88 - $(el) )); [ $lim -lt 8 ] && break
    PYTHONPATH="$BASE" timeout $lim $NCU -f -o $W/$tag python3 $W/prof.py $spec > "$RES/ncu_$tag.log" 2>&1
    echo "ncu $tag rc $? t=$(el)"
    ( ncu -i $W/$tag.ncu-rep --page details > "$RES/ncu_$tag.txt" 2>&1
      ncu -i $W/$tag.ncu-rep --page source --csv --print-source sass > $W/$tag.csv 2>/dev/null
      python3 $W/top.py $W/$tag.csv > "$RES/ncu_${tag}_top.txt" 2>&1
      gzip -c $W/$tag.csv > "$RES/ncu_${tag}_sass.csv.gz"
      ncu -i $W/$tag.ncu-rep --page raw --csv 2>/dev/null | python3 -c "
import csv,sys
r=list(csv.reader(sys.stdin))
for row in r[2:]:
  for h,v in zip(r[0],row):
    if 'pcsamp' in h or 'stall' in h or 'duration' in h or 'inst_executed' in h: print(h, v)
" > "$RES/ncu_${tag}_stalls.txt" 2>&1 ) &
  done
  wait
  ls -la "$RES"
