#!/usr/bin/env bash
# Session 9 final run, part A: bench gemm (both fp8 modes) and bench attention of the merged tree
# (.xchg/f9/full: every family, 90;90a) and of the base (.xchg/f9/base: 0614ad2) in the same
# call, then the GPU tests of the changed families on the merged tree.
# Part B (PART=B): the rest of the GPU suite.
set -u
export PYTHONUNBUFFERED=1
R=$PWD/.xchg/f9
W=/tmp/r9; mkdir -p $W
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv | tee $W/env_${PART:-A}.txt
pack() { tar -czf $OUT/r9${PART:-A}.tgz -C /tmp r9; }
if [ "${PART:-A}" = A ]; then
  cd /tmp
  for tree in full base; do
    export PYTHONPATH=$R/$tree
    s=$SECONDS
    timeout 60 python3 -m aotkernels.cli bench gemm --dtypes bf16,fp8,int8 --json $W/gemm_$tree.json > $W/gemm_$tree.txt 2>&1
    timeout 30 python3 -m aotkernels.cli bench gemm --dtypes fp8 --fast-accum --json $W/gemmfast_$tree.json > $W/gemmfast_$tree.txt 2>&1
    echo "gemm $tree: $((SECONDS - s)) s"; grep -i geomean $W/gemm_$tree.txt $W/gemmfast_$tree.txt
    pack
  done
  for tree in full base; do
    export PYTHONPATH=$R/$tree
    s=$SECONDS
    only=""; [ $tree = base ] && only="--only forward,varlen"
    timeout 80 python3 -m aotkernels.cli bench attention $only --json $W/att_$tree.json > $W/att_$tree.txt 2>&1
    echo "attention $tree: $((SECONDS - s)) s"; grep -i geomean $W/att_$tree.txt | head -5
    pack
  done
  FILES=${FILES_A:-"tests/test_jax.py tests/test_gemm_validation.py tests/test_gemm_swapped.py tests/test_gemm_splitk.py tests/test_gemm_tiles.py tests/test_gemm_batched.py tests/test_gemm_numerics.py tests/test_attention.py"}
else
  FILES=${FILES_B:-tests}
fi
cd $R/src
export PYTHONPATH=$R/full
s=$SECONDS
timeout ${SUITE_LIMIT:-250} python3 -m pytest -q -p no:cacheprovider -rfEs -m gpu $FILES ${DESELECT:-} > $W/pytest_${PART:-A}.txt 2>&1
echo "suite ${PART:-A}: $((SECONDS - s)) s" | tee -a $W/pytest_${PART:-A}.txt; tail -15 $W/pytest_${PART:-A}.txt
pack
