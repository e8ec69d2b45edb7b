"""Subprocess helpers shared by the tests that run the CLI, the build tools or a wheel build."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

# Build selection and PTX forcing from the caller's shell must not leak into a test's build/run.
_SELECTION_VARS = ("AOTKERNELS_ARCHS", "AOTKERNELS_FAMILIES", "CUDA_FORCE_PTX_JIT")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the selection variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in _SELECTION_VARS}
    env.update(extra)
    return env


def run(
    cmd: Sequence[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``cmd`` with its output captured as text, in ``env`` (default: ``clean_env()``); the
    caller checks the return code."""
    env = clean_env() if env is None else env
    return subprocess.run(
        list(cmd), capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout, check=False
    )


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m aotkernels.cli *args`` (see ``run``)."""
    return run([sys.executable, "-m", "aotkernels.cli", *args], cwd=cwd, env=env)


def pip_wheel(src: Path, out: Path, build_dir: Path, env: dict[str, str], label: str) -> Path:
    """``pip wheel src`` (no isolation, private build dir) into ``out``; the wheel's path.

    A failed or overlong build fails the test with the tail of pip's output.
    """
    cmd = [
        sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
        "-w", str(out), "-C", f"build-dir={build_dir}",
    ]  # fmt: skip
    try:
        r = run(cmd, env=env, timeout=1800)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"wheel build ({label}) exceeded {e.timeout} s")
    if r.returncode != 0:
        pytest.fail(
            f"wheel build ({label}) failed ({r.returncode}):\n{(r.stdout + r.stderr)[-6000:]}"
        )
    (whl,) = out.glob("aotkernels*.whl")
    return whl
