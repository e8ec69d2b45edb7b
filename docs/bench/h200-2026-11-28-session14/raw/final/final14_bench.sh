#!/usr/bin/env bash
# Session 14 final run, call 1: bench gemm (both fp8 modes) and bench attention of the merged tree
# (.xchg/f14/full: every family, 90;90a) and of the base (.xchg/f14/base: main at 3534074, session 13)
# in the same call, each in its own process, from /tmp.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install --no-deps --no-index -q --find-links .deps/wheels zstandard 2>&1 | grep -v "Running pip as"
R=$PWD/.xchg/f14
W=/tmp/r14; mkdir -p $W
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv | tee $W/env.txt
python3 -c "import torch; print('torch', torch.__version__)" | tee -a $W/env.txt
pack() { tar -czf $OUT/r14.tgz -C /tmp r14; }
cd /tmp
for tree in full base; do
  export PYTHONPATH=$R/$tree
  s=$SECONDS
  timeout 80 python3 -m aotkernels.cli bench gemm --dtypes bf16,fp8,int8 --json $W/gemm_$tree.json > $W/gemm_$tree.txt 2>&1
  timeout 40 python3 -m aotkernels.cli bench gemm --dtypes fp8 --fast-accum --json $W/gemmfast_$tree.json > $W/gemmfast_$tree.txt 2>&1
  echo "gemm $tree: $((SECONDS - s)) s"; grep -i geomean $W/gemm_$tree.txt $W/gemmfast_$tree.txt
  pack
done
for tree in ${ATT_TREES:-full}; do
  export PYTHONPATH=$R/$tree
  s=$SECONDS
  timeout 90 python3 -m aotkernels.cli bench attention --json $W/att_$tree.json > $W/att_$tree.txt 2>&1
  echo "attention $tree: $((SECONDS - s)) s"; grep -i geomean $W/att_$tree.txt | head -5
  pack
done
