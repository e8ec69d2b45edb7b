"""Elementwise activations: relu, gelu (exact or tanh), silu, sigmoid.

f32 / f16 / bf16, any rank; computed in f32 and rounded once. Inputs may be strided by rows
(``x[:, :h]``, ``x[::2]``); a non-contiguous last dimension is rejected (``ValueError``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..arrays import ITEMSIZE
from ._elementwise import elementwise_config, joint_rows_view
from ._op import Args, Attr, Launch, Op, Output, OutSpec, Tensor, check_dtype, rows_view

__all__ = ["gelu", "relu", "sigmoid", "silu"]

FAMILY = "activation"
DTYPES = ("f32", "f16", "bf16")
_UNROLL = 4  # kUnroll in kernels/activation/activation.cuh
_APPROXIMATE = {"none": "gelu", "tanh": "gelu_tanh"}


def _shapes(a: Args) -> tuple[OutSpec, ...]:
    x = a.need("x")
    check_dtype(a.op, "x", x, DTYPES)
    rows_view(a.op, "x", x)  # layout checks before anything is allocated
    return (OutSpec(x.shape, x.dtype),)


def _gelu_shapes(a: Args) -> tuple[OutSpec, ...]:
    if a.attr("approximate") not in _APPROXIMATE:
        raise ValueError(
            f"{a.op}: approximate must be 'none' or 'tanh', got {a.attr('approximate')!r}"
        )
    return _shapes(a)


def _launcher(kernel: Callable[[Args], str]) -> Callable[[Args], list[Launch]]:
    def launch(a: Args) -> list[Launch]:
        x = a.need("x")
        rows, cols, x_rs, o_rs = joint_rows_view(a.op, x, a.out("out"))
        if rows * cols == 0:
            return []
        cfg = elementwise_config(rows, cols, ITEMSIZE[x.dtype], a.sm_count, _UNROLL)
        args = {"out": "out", "x": "x", "rows": rows, "cols": cols,
                "x_row_stride": x_rs, "out_row_stride": o_rs}  # fmt: skip
        return [Launch(f"ak_{kernel(a)}_{x.dtype}", cfg.grid, cfg.block, args)]

    return launch


def _unary(name: str, attrs: tuple[Attr, ...] = (), kernel: Any = None) -> Op:
    return Op(
        name=name,
        family=FAMILY,
        inputs=(Tensor("x"),),
        attrs=attrs,
        outputs=(Output("out", inplace_of="x"),),
        shapes=_gelu_shapes if attrs else _shapes,
        launch=_launcher(kernel or (lambda a: name)),
    )


RELU = _unary("relu")
GELU = _unary(
    "gelu", (Attr("approximate", "str", "none"),), lambda a: _APPROXIMATE[a.attr("approximate")]
)
SILU = _unary("silu")
SIGMOID = _unary("sigmoid")


def relu(x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``max(x, 0)`` elementwise (NaN propagates)."""
    return RELU(x, out=out, stream=stream)


def gelu(x: Any, approximate: str = "none", *, out: Any = None, stream: Any = None) -> Any:
    """``x * Phi(x)``; ``approximate="tanh"`` uses torch's tanh approximation."""
    return GELU(x, approximate=approximate, out=out, stream=stream)


def silu(x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``x * sigmoid(x)`` elementwise."""
    return SILU(x, out=out, stream=stream)


def sigmoid(x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``1 / (1 + exp(-x))`` elementwise."""
    return SIGMOID(x, out=out, stream=stream)
