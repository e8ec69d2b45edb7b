#!/usr/bin/env bash
# Build, test and benchmark on a GPU machine in one call (the device lease is short).
#   tools/gpu_check.sh [pytest args...]     results under $OUT (default ./gpu_out)
# Env: AOTKERNELS_ARCHS (default: full matrix), BENCH (default "all"; "none" skips it).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$REPO/gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
cd "$REPO"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.total --format=csv | tee "$OUT/gpu.txt"
start=$(date +%s)
pip install --no-build-isolation --no-deps -q . 2>&1 | grep -v "Running pip as" | tail -20
echo "build: $(( $(date +%s) - start )) s" | tee "$OUT/build.txt"
cd /tmp  # run against the installed package, from outside the source tree
aotkernels doctor | tee "$OUT/doctor.txt"
aotkernels doctor --arch 8.7 | tee -a "$OUT/doctor.txt"
aotkernels doctor --arch 12.1 | tee -a "$OUT/doctor.txt"
aotkernels doctor --json > "$OUT/doctor.json"
python -m pytest "$REPO/tests" -q -p no:cacheprovider -rfEs "$@" 2>&1 | tee "$OUT/pytest.txt" | tail -40
if [ "${BENCH:-all}" != none ]; then
  aotkernels bench "${BENCH:-all}" --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.txt"
fi
