#!/usr/bin/env bash
# Call 3: GPU tests of the gemm family on the K-split build, then exchange round 1 (attn12).
set -u
export PYTHONUNBUFFERED=1
R=$PWD
mkdir -p /tmp/c3
python3 -m pip install --no-deps --no-index -q --find-links .deps/wheels zstandard 2>&1 | grep -v "Running pip as"
cp -r .xchg/probe/xsite /tmp/psite
s=$SECONDS
PYTHONPATH=/tmp/psite timeout 170 python3 -m pytest -q -p no:cacheprovider -rfEs -m gpu .xchg/probe/tests/test_gemm_splitk.py .xchg/probe/tests/test_gemm_swapped.py .xchg/probe/tests/test_gemm_numerics.py .xchg/probe/tests/test_gemm_tiles.py .xchg/probe/tests/test_gemm_validation.py .xchg/probe/tests/test_gemm_batched.py > /tmp/c3/gemm_tests.txt 2>&1
echo "gemm tests: $((SECONDS - s)) s" >> /tmp/c3/gemm_tests.txt; tail -8 /tmp/c3/gemm_tests.txt
tar -czf $OUT/c3.tgz -C /tmp c3
rm -rf .xchg/probe
bash .xchg/round.sh
