"""Shared fixtures. GPU tests carry the `gpu` marker and skip with the reason a GPU is missing."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=1)
def gpu_missing() -> str | None:
    """Why GPU tests cannot run here, or None when they can."""
    try:
        import torch
    except ImportError:
        return "torch is not installed (GPU tests use it as the reference)"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible to torch"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = gpu_missing()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU test: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def nvcc() -> str:
    path = shutil.which("nvcc")
    if path is None:
        pytest.skip("nvcc is not on PATH: the fatbin build test needs the CUDA toolkit")
    return path


@pytest.fixture(scope="session")
def installed_kernels() -> Path:
    """The kernels folder of the installed aotkernels (the real build under test)."""
    from aotkernels._paths import KERNELS_DIR

    if not (KERNELS_DIR / "manifest.json").is_file():
        pytest.fail(f"aotkernels is not built/installed: {KERNELS_DIR}/manifest.json missing")
    return KERNELS_DIR
