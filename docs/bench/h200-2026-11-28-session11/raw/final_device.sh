#!/usr/bin/env bash
# Session 11 final run: bench gemm (both fp8 modes) and bench attention of the merged tree
# (.xchg/f11/full: every family, 90;90a) and of the base (.xchg/f11/base: main at b4940c4, kernels
# of cd73f56) in the same call, bench attention of the merged tree (attention unchanged), then
# the GPU tests of the changed families and of the files that call them on the merged tree.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install --no-deps --no-index -q --find-links .deps/wheels zstandard 2>&1 | grep -v "Running pip as"
R=$PWD/.xchg/f11
W=/tmp/r11; mkdir -p $W
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv | tee $W/env.txt
python3 -c "import torch; print('torch', torch.__version__)" | tee -a $W/env.txt
pack() { tar -czf $OUT/r11.tgz -C /tmp r11; }
cd /tmp
for tree in full base; do
  export PYTHONPATH=$R/$tree
  s=$SECONDS
  timeout 75 python3 -m aotkernels.cli bench gemm --dtypes bf16,fp8,int8 --json $W/gemm_$tree.json > $W/gemm_$tree.txt 2>&1
  timeout 35 python3 -m aotkernels.cli bench gemm --dtypes fp8 --fast-accum --json $W/gemmfast_$tree.json > $W/gemmfast_$tree.txt 2>&1
  echo "gemm $tree: $((SECONDS - s)) s"; grep -i geomean $W/gemm_$tree.txt $W/gemmfast_$tree.txt
  pack
done
# The attention kernels are the same source in both trees: the merged tree alone.
export PYTHONPATH=$R/full
s=$SECONDS
timeout 85 python3 -m aotkernels.cli bench attention --json $W/att_full.json > $W/att_full.txt 2>&1
echo "attention full: $((SECONDS - s)) s"; grep -i geomean $W/att_full.txt | head -5
pack
cd $R/src
export PYTHONPATH=$R/full
s=$SECONDS
timeout ${SUITE_LIMIT:-200} python3 -m pytest -q -p no:cacheprovider -rfEs -m gpu $FILES > $W/pytest_A.txt 2>&1
echo "suite A: $((SECONDS - s)) s" | tee -a $W/pytest_A.txt; tail -12 $W/pytest_A.txt
pack
[ -n "${EXTRA:-}" ] || exit 0
s=$SECONDS
timeout ${EXTRA_LIMIT:-100} python3 -m pytest -q -p no:cacheprovider -rfEs -m gpu $EXTRA > $W/pytest_extra.txt 2>&1
echo "extra: $((SECONDS - s)) s" | tee -a $W/pytest_extra.txt; tail -8 $W/pytest_extra.txt
pack
