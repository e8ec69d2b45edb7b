"""Gated activations: ``out[..., :d] = act(x[..., :d]) * x[..., d:2d]`` (SwiGLU, GeGLU).

f32 / f16 / bf16; x is [..., 2d] with a contiguous last dimension, rows may be strided.
``<op>_backward(grad, x)`` gives the gradient of x ([..., 2d]) from the gradient of the
output ([..., d]); torch autograd through the forward ops runs them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .. import loader as _loader
from ..arrays import ITEMSIZE
from ._backward import gated_backward_launch, gated_backward_shapes, grad_of_x
from ._elementwise import APPROXIMATE, check_approximate, elementwise_config, gelu_kernel
from ._op import (
    Args,
    Attr,
    Launch,
    Op,
    Output,
    OutSpec,
    Tensor,
    check_dtype,
    rows_view,
)

__all__ = ["gelu_and_mul", "gelu_and_mul_backward", "silu_and_mul", "silu_and_mul_backward"]

FAMILY = "gated"


def _shapes(a: Args) -> tuple[OutSpec, ...]:
    x = a.need("x")
    check_dtype(a.op, "x", x, _loader.dtypes(FAMILY))
    if not x.shape or x.shape[-1] % 2:
        raise ValueError(
            f"{a.op}: x.shape[-1] must be even (x is [..., 2d]), got shape {tuple(x.shape)}"
        )
    check_approximate(a)
    rows_view(a.op, "x", x)  # layout checks before anything is allocated
    return (OutSpec((*x.shape[:-1], x.shape[-1] // 2), x.dtype),)


def _launcher(kernel: Callable[[Args], str]) -> Callable[[Args], list[Launch]]:
    def launch(a: Args) -> list[Launch]:
        x, out = a.need("x"), a.out("out")
        d = x.shape[-1] // 2
        rows = math.prod(x.shape[:-1])
        if rows * d == 0:
            return []
        # Both split at the last dim: each row of x holds a gate half and an up half.
        x_rows, _, x_rs = rows_view(a.op, "x", x)
        o_rows, _, o_rs = rows_view(a.op, "out", out)
        x_rs = x_rs if x_rows == rows else 2 * d
        o_rs = o_rs if o_rows == rows else d
        c = _loader.constants(FAMILY)
        cfg = elementwise_config(
            rows, d, ITEMSIZE[x.dtype], a.sm_count, c["unroll"], c["max_threads"]
        )
        args = {"out": "out", "x": "x", "rows": rows, "d": d,
                "x_row_stride": x_rs, "out_row_stride": o_rs}  # fmt: skip
        return [Launch(f"ak_{kernel(a)}_{x.dtype}", cfg.grid, cfg.block, args)]

    return launch


def _gated(name: str, attrs: tuple[Attr, ...], kernel: Callable[[Args], str]) -> Op:
    return Op(
        name=name,
        family=FAMILY,
        inputs=(Tensor("x"),),
        attrs=attrs,
        outputs=(Output("out"),),
        shapes=_shapes,
        launch=_launcher(kernel),
        backward=grad_of_x(name),
    )


SILU_AND_MUL = _gated("silu_and_mul", (), lambda a: "silu_and_mul")
GELU_AND_MUL = _gated("gelu_and_mul", (APPROXIMATE,), lambda a: f"{gelu_kernel(a)}_and_mul")


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
    return SILU_AND_MUL(x, out=out, stream=stream)


def gelu_and_mul(x: Any, approximate: str = "none", *, out: Any = None, stream: Any = None) -> Any:
    """``gelu(x[..., :d]) * x[..., d:]`` (exact or tanh GELU); returns [..., d]."""
    return GELU_AND_MUL(x, approximate=approximate, out=out, stream=stream)


# --- backward ----------------------------------------------------------------------------------


def _gated_backward(name: str, attrs: tuple[Attr, ...], kernel: Callable[[Args], str]) -> Op:
    return Op(
        name=f"{name}_backward",
        family=FAMILY,
        inputs=(Tensor("grad"), Tensor("x")),
        attrs=attrs,
        outputs=(Output("out", inplace_of="x"),),
        shapes=gated_backward_shapes,
        launch=lambda a: gated_backward_launch(a, kernel(a)),
    )


SILU_AND_MUL_BACKWARD = _gated_backward("silu_and_mul", (), lambda a: "silu_and_mul")
GELU_AND_MUL_BACKWARD = _gated_backward(
    "gelu_and_mul", (APPROXIMATE,), lambda a: f"{gelu_kernel(a)}_and_mul"
)


def silu_and_mul_backward(grad: Any, x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """The gradient of ``silu_and_mul`` at x: with ``g, u = x[..., :d], x[..., d:]``,
    ``out[..., :d] = grad * u * silu'(g)`` and ``out[..., d:] = grad * silu(g)``.

    Parameters
    ----------
    grad : CUDA array, float32 / float16 / bfloat16, shape [..., d]
        The gradient of silu_and_mul's output, x's dtype.
    x : CUDA array, shape [..., 2d]
        silu_and_mul's input. Both may be strided by rows (last dimension contiguous).
    out : CUDA array, optional
        Result buffer of x's shape and dtype; may be x itself (in place).
    stream : int or stream object, optional (see ``aotkernels.ops``)

    Returns
    -------
    The gradient of x, [..., 2d] (``out`` when given), f32 math rounded once to x's dtype.
    """
    return SILU_AND_MUL_BACKWARD(grad, x, out=out, stream=stream)


def gelu_and_mul_backward(
    grad: Any, x: Any, approximate: str = "none", *, out: Any = None, stream: Any = None
) -> Any:
    """The gradient of ``gelu_and_mul`` at x: ``out[..., :d] = grad * u * gelu'(g)``,
    ``out[..., d:] = grad * gelu(g)`` (exact or tanh GELU). Arguments as
    :func:`silu_and_mul_backward`."""
    return GELU_AND_MUL_BACKWARD(grad, x, approximate=approximate, out=out, stream=stream)
