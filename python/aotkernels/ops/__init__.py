"""The ops, one module per kernel family; the public names are re-exported by ``aotkernels``."""

from __future__ import annotations

from .activation import gelu, relu, sigmoid, silu
from .gated import gelu_and_mul, silu_and_mul

__all__ = ["gelu", "gelu_and_mul", "relu", "sigmoid", "silu", "silu_and_mul"]
