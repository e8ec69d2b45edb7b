#!/usr/bin/env bash
# Download the build-only wheels a GPU machine without network needs into .deps/wheels (git-
# ignored; pass `.deps/wheels` in the device tool's carry list). tools/gpu_check.sh installs them.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/wheels
python3 -m pip download --no-deps -q -d .deps/wheels nvidia-cutlass==4.2.0.0
ls -l .deps/wheels
