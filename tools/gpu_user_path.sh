#!/usr/bin/env bash
# A user's path on a GPU machine: build the cp312 (abi3) wheel of one CUDA variant, install only
# that file into a fresh venv (its --system-site-packages provide torch, CuPy and JAX), then run
# the doctor, the GPU tests and compute-sanitizer from a folder outside the source tree.
#   tools/gpu_user_path.sh            results under $OUT (default ./gpu_out)
# Env: PYTHON (default python3), VARIANT (cu13 | cu12; default cu13).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$REPO/gpu_out}
PY=${PYTHON:-python3}
VARIANT=${VARIANT:-cu13}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
rm -rf /tmp/ak-src /tmp/ak-wheels /tmp/ak-venv /tmp/ak-elsewhere
cp -r "$REPO" /tmp/ak-src  # set_variant edits pyproject.toml: leave the checkout alone
cd /tmp/ak-src
$PY tools/set_variant.py "$VARIANT"
start=$(date +%s)
$PY -m pip wheel . --no-deps --no-build-isolation -q -w /tmp/ak-wheels 2>&1 | grep -v "Running pip as" | tail -5
echo "wheel build: $(( $(date +%s) - start )) s" | tee "$OUT/user_path.txt"
ls -l /tmp/ak-wheels | tee -a "$OUT/user_path.txt"
$PY tools/set_variant.py --check /tmp/ak-wheels/*.whl 2>&1 | tee -a "$OUT/user_path.txt"
$PY -m venv --system-site-packages /tmp/ak-venv
# Where $PY is itself a venv (as on these machines), --system-site-packages reaches only the base
# interpreter: add $PY's site-packages (torch, CuPy, JAX, pytest) after the venv's own.
$PY -c "import site; print(site.getsitepackages()[0])" \
  > "$(/tmp/ak-venv/bin/python -c 'import site; print(site.getsitepackages()[0])')/parent.pth"
/tmp/ak-venv/bin/python -m pip install -q --no-deps --no-index /tmp/ak-wheels/*.whl
mkdir -p /tmp/ak-elsewhere && cd /tmp/ak-elsewhere
/tmp/ak-venv/bin/python -c "import aotkernels; print('imported from', aotkernels.__file__)" \
  | tee -a "$OUT/user_path.txt"
/tmp/ak-venv/bin/aotkernels doctor 2>&1 | tee -a "$OUT/user_path.txt"
/tmp/ak-venv/bin/python -m pytest "$REPO/tests" -m gpu -q -p no:cacheprovider -rfEs 2>&1 \
  | tee "$OUT/user_pytest.txt" | tail -8
for tool in memcheck racecheck initcheck synccheck; do
  echo "--- compute-sanitizer --tool $tool"
  compute-sanitizer --tool "$tool" /tmp/ak-venv/bin/python "$REPO/tests/scripts/sanitize_case.py" 2>&1 | tail -2
done | tee "$OUT/sanitizer.txt"
