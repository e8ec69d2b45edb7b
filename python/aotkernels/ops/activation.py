"""Elementwise activations: relu, gelu (exact or tanh), silu, sigmoid.

f32 / f16 / bf16, any rank; computed in f32 and rounded once. Inputs may be strided by rows
(``x[:, :h]``, ``x[::2]``); a non-contiguous last dimension is rejected (``ValueError``).
"""

from __future__ import annotations

from typing import Any

from ._common import (
    check_dtype,
    finish,
    joint_rows_view,
    output,
    prepare,
    rows_view,
    torch_fast1,
)
from ._elementwise import launch_rows

__all__ = ["gelu", "relu", "sigmoid", "silu"]

FAMILY = "activation"
DTYPES = ("f32", "f16", "bf16")
_UNROLL = 4  # kUnroll in kernels/activation/activation.cuh


def _unary(op: str, kernel: str, x: Any, out: Any, stream: Any) -> Any:
    symbol = f"ak_{kernel}_"
    res, key = torch_fast1(symbol, out, x, stream)
    if res is not None:
        return res
    call = prepare(op, x, stream)
    xi = call.x
    check_dtype(op, "x", xi, DTYPES)
    x_split = rows_view(op, "x", xi)  # layout checks before anything is allocated
    res, oi = output(op, call, out, xi.shape, xi.dtype)
    rows, cols, x_rs, o_rs = joint_rows_view(op, xi, x_split, oi)
    if rows * cols:
        launch_rows(FAMILY, symbol + xi.dtype, call.stream, oi, xi, rows, cols, (x_rs, o_rs),
                    _UNROLL, key, out is None)  # fmt: skip
    return finish(call, res, out is None)


def relu(x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``max(x, 0)`` elementwise (NaN propagates)."""
    return _unary("relu", "relu", x, out, stream)


def gelu(x: Any, approximate: str = "none", *, out: Any = None, stream: Any = None) -> Any:
    """``x * Phi(x)``; ``approximate="tanh"`` uses torch's tanh approximation."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _unary("gelu", "gelu" if approximate == "none" else "gelu_tanh", x, out, stream)


def silu(x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``x * sigmoid(x)`` elementwise."""
    return _unary("silu", "silu", x, out, stream)


def sigmoid(x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``1 / (1 + exp(-x))`` elementwise."""
    return _unary("sigmoid", "sigmoid", x, out, stream)
