"""aotkernels: prebuilt CUDA kernels for every NVIDIA GPU from sm_75 to sm_120, through DLPack.

``import aotkernels`` touches no CUDA driver: devices are detected and kernels loaded on the
first op (or by ``preload()``), so importing works on machines without a GPU and before fork.
"""

from __future__ import annotations

from typing import Any

from ._frontends import install as _install_frontends
from .errors import AotKernelsError, DriverTooOldError, NoKernelImageError
from .loader import preload
from .ops import (
    attention,
    attention_decode,
    attention_varlen,
    fused_add_rms_norm,
    gelu,
    gelu_and_mul,
    gelu_and_mul_backward,
    gelu_backward,
    layer_norm,
    layer_norm_backward,
    matmul,
    quantize_fp8,
    relu,
    relu_backward,
    rms_norm,
    rms_norm_backward,
    rope,
    scaled_mm,
    sigmoid,
    sigmoid_backward,
    silu,
    silu_and_mul,
    silu_and_mul_backward,
    silu_backward,
    softmax,
    softmax_backward,
)

__version__ = "0.1.0"

__all__ = [
    "AotKernelsError",
    "DriverTooOldError",
    "NoKernelImageError",
    "__version__",
    "attention",
    "attention_decode",
    "attention_varlen",
    "doctor",
    "fused_add_rms_norm",
    "gelu",
    "gelu_backward",
    "gelu_and_mul",
    "gelu_and_mul_backward",
    "layer_norm",
    "layer_norm_backward",
    "matmul",
    "quantize_fp8",
    "matrix",
    "preload",
    "relu",
    "relu_backward",
    "rms_norm",
    "rms_norm_backward",
    "rope",
    "scaled_mm",
    "sigmoid",
    "sigmoid_backward",
    "silu",
    "silu_backward",
    "silu_and_mul",
    "silu_and_mul_backward",
    "softmax",
    "softmax_backward",
]


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
