"""aotkernels: prebuilt CUDA kernels for every NVIDIA GPU from sm_75 to sm_120, through DLPack.

``import aotkernels`` touches no CUDA driver: devices are detected and kernels loaded on the
first op (or by ``preload()``), so importing works on machines without a GPU and before fork.
"""

from __future__ import annotations

from typing import Any

from .errors import AotKernelsError, DriverTooOldError, NoKernelImageError
from .loader import preload
from .ops import (
    fused_add_rms_norm,
    gelu,
    gelu_and_mul,
    layer_norm,
    matmul,
    relu,
    rms_norm,
    rope,
    scaled_mm,
    sigmoid,
    silu,
    silu_and_mul,
    softmax,
)

__version__ = "0.1.0"

__all__ = [
    "AotKernelsError",
    "DriverTooOldError",
    "NoKernelImageError",
    "__version__",
    "doctor",
    "fused_add_rms_norm",
    "gelu",
    "gelu_and_mul",
    "layer_norm",
    "matmul",
    "matrix",
    "preload",
    "relu",
    "rms_norm",
    "rope",
    "scaled_mm",
    "sigmoid",
    "silu",
    "silu_and_mul",
    "softmax",
]


def matrix() -> dict[str, Any]:
    """The arch matrix this package was built from, in ``aotkernels matrix --json`` shape."""
    from ._paths import matrix_path
    from .arch_matrix import load_matrix

    return load_matrix(matrix_path(), check_sources=False).to_json()


def doctor(arch: str | None = None, driver: str | None = None) -> dict[str, Any]:
    """Devices, driver, and per family the image that runs (or would, for ``arch="X.Y"``)."""
    from ._doctor import report

    return report(arch, driver)
