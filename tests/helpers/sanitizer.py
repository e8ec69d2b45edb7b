"""compute-sanitizer runs shared by the GPU tests: find the tool, judge its output."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

# memcheck/initcheck/synccheck end with "ERROR SUMMARY", racecheck with its own summary.
_CLEAN = re.compile(
    r"(ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed \(0 errors, 0 warnings\))"
)


def sanitizer_or_skip() -> str:
    tool = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not Path(tool).exists():
        pytest.skip("compute-sanitizer is not installed")
    return tool


def assert_clean(proc: subprocess.CompletedProcess[str], marker: str) -> None:
    """The case really ran under the tool (``marker`` printed), and the tool found nothing."""
    out = proc.stdout + proc.stderr
    assert marker in out, out[-3000:]
    assert _CLEAN.search(out), out[-3000:]
    assert proc.returncode == 0, out[-3000:]
