"""The PEP 517 build backend: scikit-build-core, plus CUDA 13's compiler from PyPI when this
machine has no nvcc.

``pip install .`` on a box with only Python and a C++ compiler must work, as it does for CMake
(scikit-build-core adds the ``cmake`` wheel to the build requirements when none is found). When
no nvcc is found (``CUDACXX``, ``nvcc`` on ``PATH``, ``$CUDAToolkit_ROOT/bin``, ``$CUDA_PATH/bin``,
``$CUDA_HOME/bin``: where CMake and FindCUDAToolkit look), the build requirements gain the CUDA 13
compiler set that tools/cuda_toolchain.py pins (nvcc, crt, nvvm, runtime headers, CCCL of one
release), and the build points CMake at it. A machine with an nvcc builds with that one, as before.

pyproject.toml names this module (``backend-path = ["tools"]``); everything else is
scikit-build-core's.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from scikit_build_core import build as _skbuild
from scikit_build_core.build import (
    build_sdist,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

import cuda_toolchain

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]


def local_nvcc() -> str | None:
    """The nvcc CMake would find on this machine, or None."""
    if os.environ.get("CUDACXX"):
        return os.environ["CUDACXX"]
    found = shutil.which("nvcc")
    if found:
        return found
    for var in ("CUDAToolkit_ROOT", "CUDA_PATH", "CUDA_HOME"):
        root = os.environ.get(var)
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return str(Path(root) / "bin" / "nvcc")
    return None


def pypi_nvcc_requirements() -> list[str]:
    """The pinned CUDA 13 compiler set (exact versions; pip picks the platform's wheel)."""
    return list(cuda_toolchain.PYPI_13)


def _pypi_cuda_root() -> Path | None:
    spec = importlib.util.find_spec("nvidia")  # a namespace package: every nvidia-* wheel
    for base in (spec.submodule_search_locations or []) if spec else []:
        root = Path(base) / "cu13"
        if (root / "bin" / "nvcc").is_file():
            return root
    return None


def _use_pypi_nvcc() -> None:
    """Without a local nvcc, point CMake at the PyPI compiler set in the build environment."""
    if local_nvcc() is not None:
        return
    root = _pypi_cuda_root()
    if root is None:
        raise RuntimeError(
            "aotkernels: no nvcc here (CUDACXX, PATH, CUDAToolkit_ROOT, CUDA_PATH, CUDA_HOME) "
            "and no CUDA compiler from PyPI in this Python: build with isolation (the default of "
            "pip install .), or pip install " + " ".join(pypi_nvcc_requirements())
        )
    cuda_toolchain.link_layout(13, root)
    os.environ.update(
        CUDACXX=str(root / "bin" / "nvcc"),
        CUDAToolkit_ROOT=str(root),
        AOTKERNELS_TOOLKIT_ORIGIN=f"PyPI {pypi_nvcc_requirements()[0]}",
        PATH=f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    print(
        f"aotkernels build: no local nvcc; CUDA from PyPI: {root / 'bin' / 'nvcc'}", file=sys.stderr
    )


def _requires_hook(
    skbuild_hook: Callable[[dict[str, Any] | None], Sequence[str]],
) -> Callable[[dict[str, Any] | None], list[str]]:
    """scikit-build-core's requirements hook, plus the PyPI compiler set where no nvcc is found."""

    def hook(config_settings: dict[str, Any] | None = None) -> list[str]:
        reqs = list(skbuild_hook(config_settings))
        return reqs + (pypi_nvcc_requirements() if local_nvcc() is None else [])

    return hook


def _build_hook(skbuild_hook: Callable[..., Any]) -> Callable[..., str]:
    """scikit-build-core's build hook (wheel or editable), with CMake pointed at the PyPI
    compiler set where no nvcc is found."""

    def hook(
        wheel_directory: str,
        config_settings: dict[str, Any] | None = None,
        metadata_directory: str | None = None,
    ) -> str:
        _use_pypi_nvcc()
        return str(skbuild_hook(wheel_directory, config_settings, metadata_directory))

    return hook


get_requires_for_build_wheel = _requires_hook(_skbuild.get_requires_for_build_wheel)
get_requires_for_build_editable = _requires_hook(_skbuild.get_requires_for_build_editable)
build_wheel = _build_hook(_skbuild.build_wheel)
build_editable = _build_hook(_skbuild.build_editable)
