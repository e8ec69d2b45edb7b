#!/usr/bin/env bash
# Session 14 final run, call 2: the GPU tests on the merged tree (.xchg/f14/full), run from a copy
# of main's tracked files (.xchg/f14/src): part A the changed families and their callers, part B
# the other files that call the GEMM ops.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install --no-deps --no-index -q --find-links .deps/wheels zstandard 2>&1 | grep -v "Running pip as"
R=$PWD/.xchg/f14
W=/tmp/t14; mkdir -p $W
pack() { tar -czf $OUT/t14.tgz -C /tmp t14; }
cd $R/src
export PYTHONPATH=$R/full
A="tests/test_jax.py tests/test_gemm_validation.py tests/test_gemm_swapped.py tests/test_gemm_splitk.py tests/test_gemm_tiles.py tests/test_gemm_batched.py tests/test_gemm_numerics.py tests/test_attention.py"
s=$SECONDS
timeout 230 python3 -m pytest -q -p no:cacheprovider -rfEs -m gpu $A > $W/pytest_A.txt 2>&1
echo "suite A: $((SECONDS - s)) s" | tee -a $W/pytest_A.txt; tail -12 $W/pytest_A.txt
pack
B="tests/test_runtime.py tests/test_torch_frontend.py tests/test_llama_e2e.py tests/test_int64.py tests/test_properties.py tests/test_quant.py tests/test_bench.py tests/test_matrix.py tests/test_plan.py"
s=$SECONDS
timeout ${B_LIMIT:-250} python3 -m pytest -q -p no:cacheprovider -rfEs -m gpu $B > $W/pytest_B.txt 2>&1
echo "suite B: $((SECONDS - s)) s" | tee -a $W/pytest_B.txt; tail -12 $W/pytest_B.txt
pack
