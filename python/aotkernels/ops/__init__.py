"""The ops, one module per kernel family; the public names are re-exported by ``aotkernels``.

Every op takes the keyword ``stream``, the stream its kernels are launched on: an int (a
``CUstream`` handle) or a stream object (one with ``__cuda_stream__``, or torch's and CuPy's).
By default, the current stream of the first array's framework for torch and CuPy arrays, else
the legacy default stream.
"""

from __future__ import annotations

from .activation import (
    gelu,
    gelu_backward,
    relu,
    relu_backward,
    sigmoid,
    sigmoid_backward,
    silu,
    silu_backward,
)
from .attention import attention, attention_decode, attention_varlen
from .gated import gelu_and_mul, gelu_and_mul_backward, silu_and_mul, silu_and_mul_backward
from .gemm import matmul, scaled_mm
from .norm import (
    fused_add_rms_norm,
    layer_norm,
    layer_norm_backward,
    rms_norm,
    rms_norm_backward,
)
from .quant import quantize_fp8
from .rope import rope
from .softmax import softmax, softmax_backward

__all__ = [
    "attention",
    "attention_decode",
    "attention_varlen",
    "fused_add_rms_norm",
    "gelu",
    "gelu_backward",
    "gelu_and_mul",
    "gelu_and_mul_backward",
    "layer_norm",
    "layer_norm_backward",
    "matmul",
    "quantize_fp8",
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
