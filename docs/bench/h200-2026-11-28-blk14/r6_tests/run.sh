#!/bin/bash
# blk14 tests of the final candidate (epilogue factors of 128x128 two-level tiles read under the
# last wgmma batch; the build of round r5): the GEMM compute-sanitizer tests, then the GEMM suites.
set -u
if [ "$1" = build ]; then cp -r xsite "$SITE"; exit 0; fi
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
s=$SECONDS
timeout 30 python3 -m pytest -q -p no:cacheprovider -rfEs -m gpu tests/test_gemm_numerics.py \
  -k compute_sanitizer 2>&1 | tail -4
echo "sanitizers $((SECONDS - s)) s"
s=$SECONDS
timeout 26 python3 -m pytest -q -p no:cacheprovider -rfEs -m gpu tests/test_gemm_numerics.py \
  -k "not compute_sanitizer" 2>&1 | tail -4
echo "numerics $((SECONDS - s)) s"
s=$SECONDS
timeout 20 python3 -m pytest -q -p no:cacheprovider -rfEs -m gpu tests/test_gemm_tiles.py \
  tests/test_gemm_splitk.py tests/test_gemm_swapped.py tests/test_gemm_batched.py \
  tests/test_gemm_validation.py 2>&1 | tail -4
echo "other gemm suites $((SECONDS - s)) s"
