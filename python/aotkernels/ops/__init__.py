"""The ops, one module per kernel family; the public names are re-exported by ``aotkernels``."""

from __future__ import annotations

from .activation import gelu, relu, sigmoid, silu
from .gated import gelu_and_mul, silu_and_mul
from .gemm import matmul, scaled_mm
from .norm import fused_add_rms_norm, layer_norm, rms_norm
from .rope import rope
from .softmax import softmax

__all__ = [
    "fused_add_rms_norm",
    "gelu",
    "gelu_and_mul",
    "layer_norm",
    "matmul",
    "relu",
    "rms_norm",
    "rope",
    "scaled_mm",
    "sigmoid",
    "silu",
    "silu_and_mul",
    "softmax",
]
