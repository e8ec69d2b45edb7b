set -u
python3 -m pip install --no-deps --no-index -q --find-links .deps/wheels zstandard 2>&1 | grep -v "Running pip as"
X=$PWD/.xchg; cd /tmp; export PYTHONPATH=$X/full
timeout 60 python3 $X/probe.py 2>&1 | tee $OUT/probe.txt
for r in 20 50; do
  timeout 40 python3 -m aotkernels.cli bench gemm --dtypes bf16,fp8 --reps $r > $OUT/bench_r$r.txt 2>&1
  grep -E "│ (16|128) +│" $OUT/bench_r$r.txt | cut -c1-140
done
