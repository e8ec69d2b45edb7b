"""aotkernels: prebuilt CUDA kernels for every NVIDIA GPU from sm_75 to sm_120, through DLPack.

``import aotkernels`` touches no CUDA driver: devices are detected and kernels loaded on the
first op (or by ``preload()``), so importing works on machines without a GPU and before fork.
"""

from __future__ import annotations

from typing import Any

from . import ops
from ._frontends import install as _install_frontends
from .errors import AotKernelsError, DriverTooOldError, NoKernelImageError
from .loader import preload
from .ops import *  # noqa: F403 (the ops are re-exported: ops.__all__ names them)

__version__ = "0.1.0"

__all__ = [
    "AotKernelsError",
    "DriverTooOldError",
    "NoKernelImageError",
    "__version__",
    "doctor",
    "matrix",
    "preload",
]
__all__ += ops.__all__


_install_frontends()


def matrix() -> dict[str, Any]:
    """The arch matrix this package was built from, in ``aotkernels matrix --json`` shape."""
    from ._build.matrix import load_matrix
    from ._paths import matrix_path

    return load_matrix(matrix_path(), check_sources=False).to_json()


def doctor(arch: str | None = None, driver: str | None = None) -> dict[str, Any]:
    """Devices, driver, and per family the image that runs (or would, for ``arch="X.Y"``)."""
    from ._doctor import report

    return report(arch, driver)
