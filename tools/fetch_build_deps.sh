#!/usr/bin/env bash
# Download the build-only wheels a GPU machine without network needs into .deps/wheels (git-
# ignored; pass `.deps/wheels` in the device tool's carry list). tools/gpu_check.sh installs them.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/wheels
python3 -m pip download --no-deps -q -d .deps/wheels nvidia-cutlass==4.2.0.0
# zstandard for the GPU machine's Python (3.12 there; PYTHON_VERSION overrides), any manylinux.
python3 -m pip download --no-deps -q -d .deps/wheels --only-binary=:all: \
  --python-version "${PYTHON_VERSION:-3.12}" --platform manylinux2014_x86_64 zstandard==0.25.0
ls -l .deps/wheels
