#!/usr/bin/env bash
# Build, test and benchmark on a GPU machine in one call (the device lease is short).
#   tools/gpu_check.sh [pytest args...]     results under $OUT (default ./gpu_out)
# Env: PYTHON (default python3), AOTKERNELS_ARCHS (default: full matrix), BREAKDOWN=1 (host
#      cost breakdown), BENCH_ARGS (extra bench flags),
#      BENCH ("all" by default, "launch", "elementwise", or "none").
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$REPO/gpu_out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
cd "$REPO"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
# The GEMM family's CuTe headers: the GPU machine has no network, so the nvidia-cutlass wheel
# travels in .deps/wheels (tools/fetch_build_deps.sh) and is installed without its Python deps.
if ls .deps/wheels/nvidia_cutlass-*.whl >/dev/null 2>&1; then
  $PY -m pip install --no-deps --no-index -q .deps/wheels/nvidia_cutlass-*.whl 2>&1 | grep -v "Running pip as"
fi
# zstandard: the manifest step reads the zstd-compressed images' kernels (without it, the
# toolkit's cuobjdump on PATH does; Python 3.14 needs neither).
if ls .deps/wheels/zstandard-*.whl >/dev/null 2>&1; then
  $PY -m pip install --no-deps --no-index -q --find-links .deps/wheels zstandard 2>&1 | grep -v "Running pip as"
fi
start=$(date +%s)
$PY -m pip install --no-build-isolation --no-deps -q . 2>&1 | grep -v "Running pip as" | tail -20
echo "build: $(( $(date +%s) - start )) s" | tee "$OUT/build.txt"
AK="$PY -m aotkernels.cli"
(cd /tmp && $AK doctor && $AK doctor --arch 8.7 && $AK doctor --arch 12.1) 2>&1 | tee "$OUT/doctor.txt"
(cd /tmp && $AK doctor --json) > "$OUT/doctor.json"
# pytest from the repo root imports the installed package: python/ is not on sys.path.
$PY -m pytest -q -p no:cacheprovider -rfEs "$@" 2>&1 | tee "$OUT/pytest.txt" | tail -60
if [ -n "${BREAKDOWN:-}" ]; then $PY "$REPO/tools/launch_breakdown.py" 2>&1 | tee "$OUT/breakdown.txt"; fi
if [ "${BENCH:-all}" != none ]; then
  (cd /tmp && $AK bench "${BENCH:-all}" ${BENCH_ARGS:-} --json "$OUT/bench.json") 2>&1 | tee "$OUT/bench.txt"
fi
