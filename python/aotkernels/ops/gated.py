"""Gated activations: ``out[..., :d] = act(x[..., :d]) * x[..., d:2d]`` (SwiGLU, GeGLU).

f32 / f16 / bf16; x is [..., 2d] with a contiguous last dimension, rows may be strided.
"""

from __future__ import annotations

import math
from typing import Any

from ._common import (
    check_dtype,
    check_rows_disjoint,
    finish,
    output,
    prepare,
    rows_view,
    torch_fast1,
)
from ._elementwise import launch_rows

__all__ = ["gelu_and_mul", "silu_and_mul"]

FAMILY = "gated"
DTYPES = ("f32", "f16", "bf16")
_UNROLL = 2  # kUnroll in kernels/gated/gated.cuh


def _gated(op: str, kernel: str, x: Any, out: Any, stream: Any) -> Any:
    symbol = f"ak_{kernel}_"
    res, key = torch_fast1(symbol, out, x, stream)
    if res is not None:
        return res
    call = prepare(op, x, stream)
    xi = call.x
    check_dtype(op, "x", xi, DTYPES)
    if not xi.shape or xi.shape[-1] % 2:
        raise ValueError(
            f"{op}: x.shape[-1] must be even (x is [..., 2d]), got shape {tuple(xi.shape)}"
        )
    d = xi.shape[-1] // 2
    rows = math.prod(xi.shape[:-1])
    x_rows, _, x_rs = rows_view(op, "x", xi)  # layout checks before anything is allocated
    res, oi = output(op, call, out, (*xi.shape[:-1], d), xi.dtype)
    if rows * d:
        # Both split at the last dim: each row of x holds a gate half and an up half.
        o_rows, _, o_rs = rows_view(op, "out", oi)
        x_rs = x_rs if x_rows == rows else 2 * d
        o_rs = o_rs if o_rows == rows else d
        check_rows_disjoint(op, "out", rows, d, o_rs)
        launch_rows(FAMILY, symbol + xi.dtype, call.stream, oi, xi, rows, d, (x_rs, o_rs),
                    _UNROLL, key, out is None)  # fmt: skip
    return finish(call, res, out is None)


def silu_and_mul(
    x: Any, *, out_dtype: Any = None, scale: Any = None, out: Any = None, stream: Any = None
) -> Any:
    """``silu(x[..., :d]) * x[..., d:]`` for x of shape [..., 2d]; returns [..., d].

    ``out_dtype="float8_e4m3fn"`` / ``"float8_e5m2"`` quantizes the f32 result on store and
    returns ``(q, scale)``: static with ``scale=`` (float32, one element), else one dynamic
    scale per row (``aotkernels.ops.quant``).
    """
    if out_dtype is not None or scale is not None:
        from . import quant

        fp8 = quant.fp8_out_dtype("silu_and_mul", x, out_dtype, scale)
        if fp8 is not None:
            return quant.silu_and_mul_fp8(x, fp8, scale, out, stream)
    return _gated("silu_and_mul", "silu_and_mul", x, out, stream)


def gelu_and_mul(x: Any, approximate: str = "none", *, out: Any = None, stream: Any = None) -> Any:
    """``gelu(x[..., :d]) * x[..., d:]`` (exact or tanh GELU); returns [..., d]."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu_and_mul: approximate must be 'none' or 'tanh', got {approximate!r}")
    kernel = "gelu_and_mul" if approximate == "none" else "gelu_tanh_and_mul"
    return _gated("gelu_and_mul", kernel, x, out, stream)
