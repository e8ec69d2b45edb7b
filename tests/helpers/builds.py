"""Subprocess helpers shared by the tests that run the CLI, the build tools or a wheel build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Build selection and PTX forcing from the caller's shell must not leak into a test's build/run.
_SELECTION_VARS = ("AOTKERNELS_ARCHS", "AOTKERNELS_FAMILIES", "CUDA_FORCE_PTX_JIT")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the selection variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in _SELECTION_VARS}
    env.update(extra)
    return env


def pip_wheel(src: Path, out: Path, build_dir: Path, env: dict[str, str], label: str) -> Path:
    """``pip wheel src`` (no isolation, private build dir) into ``out``; the wheel's path.

    A failed or overlong build fails the test with the tail of pip's output.
    """
    cmd = [
        sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
        "-w", str(out), "-C", f"build-dir={build_dir}",
    ]  # fmt: skip
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, check=False)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"wheel build ({label}) exceeded {e.timeout} s")
    if r.returncode != 0:
        pytest.fail(
            f"wheel build ({label}) failed ({r.returncode}):\n{(r.stdout + r.stderr)[-6000:]}"
        )
    (whl,) = out.glob("aotkernels*.whl")
    return whl
