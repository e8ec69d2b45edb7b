"""Softmax over the last dimension, f32 / f16 / bf16, f32 math and one rounding on store.

Rows may be strided (``x[:, :h]``) and start at any element; the last dimension must be
contiguous. Rows up to 128 KiB stay in registers; longer rows are streamed three times (max, sum,
store). ``softmax_backward(grad, y)`` gives ``y * (grad - sum(grad * y))``; torch autograd
through ``softmax`` runs it.
"""

from __future__ import annotations

from typing import Any

from .. import loader as _loader
from ..arrays import ITEMSIZE
from ._backward import as_rows, softmax_backward_launch, softmax_backward_shapes
from ._op import (
    Args,
    Attr,
    Backward,
    BackwardCtx,
    Launch,
    Op,
    Output,
    OutSpec,
    Tensor,
    check_dtype,
    row_layout,
)
from ._rowwise import check_last_dim, rowwise_config, vectorizable

__all__ = ["softmax", "softmax_backward"]

FAMILY = "softmax"


def _shapes(a: Args) -> tuple[OutSpec, ...]:
    x = a.need("x")
    check_dtype(a.op, "x", x, _loader.dtypes(FAMILY))
    check_last_dim(a, tuple(x.shape), "; move that dimension last and pass a contiguous copy")
    row_layout(a.op, "x", x)  # layout checks before anything is allocated
    return (OutSpec(tuple(x.shape), x.dtype),)


def _launch(a: Args) -> list[Launch]:
    x, out = a.need("x"), a.out("out")
    cols = x.shape[-1] if x.shape else 1
    rows, x_rs = row_layout(a.op, "x", x)
    o_rs = row_layout(a.op, "out", out)[1]
    if rows * cols == 0:
        return []
    item = ITEMSIZE[x.dtype]
    vec = vectorizable(cols, item, (out, x), (x_rs, o_rs), rows)
    cfg = rowwise_config(rows, cols, item, a.sm_count, vec)
    args = {"out": "out", "x": "x", "rows": rows, "cols": cols, "x_row_stride": x_rs,
            "out_row_stride": o_rs, "vecs_per_thread": cfg.vecs_per_thread}  # fmt: skip
    return [Launch(f"ak_softmax_{x.dtype}", cfg.grid, cfg.block, args)]


def _grad(ctx: BackwardCtx, grads: tuple[Any, ...]) -> dict[str, Any]:
    """x's gradient from the saved output (grad viewed as rows: autograd may broadcast it)."""
    return {"x": softmax_backward(as_rows(grads[0]), ctx.saved["out"], dim=ctx.attr("dim"))}


SOFTMAX = Op(
    name="softmax",
    family=FAMILY,
    inputs=(Tensor("x"),),
    attrs=(Attr("dim", "int", -1),),
    outputs=(Output("out", inplace_of="x"),),
    shapes=_shapes,
    launch=_launch,
    backward=Backward(saved=("out",), fn=_grad),
)

SOFTMAX_BACKWARD = Op(
    name="softmax_backward",
    family=FAMILY,
    inputs=(Tensor("grad"), Tensor("y")),
    attrs=(Attr("dim", "int", -1),),
    outputs=(Output("out", inplace_of="grad"),),
    shapes=softmax_backward_shapes,
    launch=softmax_backward_launch,
)


def softmax(x: Any, dim: int = -1, *, out: Any = None, stream: Any = None) -> Any:
    """``out = exp(x - max(x)) / sum(exp(x - max(x)))`` along the last dimension.

    Numerically safe (the row maximum is subtracted first). NaN anywhere in a row makes the
    whole row NaN. A row that is entirely ``-inf`` (fully masked) gives **0** everywhere (the
    safe-softmax convention), where ``torch.softmax`` returns NaN.

    Parameters
    ----------
    x : CUDA array, float32 / float16 / bfloat16
        Any rank (0-d is one row of one element); last dimension contiguous.
    dim : int
        Must name the last dimension (``-1`` or ``x.ndim - 1``); other dimensions raise
        ``NotImplementedError``.
    out : CUDA array, optional
        Result buffer of x's shape and dtype; may be x itself (in place).
    stream : int or stream object, optional (see ``aotkernels.ops``)

    Returns
    -------
    The probabilities (``out`` when given), in x's dtype and framework.
    """
    return SOFTMAX(x, dim=dim, out=out, stream=stream)


def softmax_backward(
    grad: Any, y: Any, dim: int = -1, *, out: Any = None, stream: Any = None
) -> Any:
    """``out = y * (grad - sum(grad * y, dim))``: the gradient of ``softmax`` at its input, from
    its output ``y = softmax(x)`` and the gradient of that output.

    Parameters
    ----------
    grad : CUDA array, float32 / float16 / bfloat16
        The gradient of softmax's output; y's shape and dtype.
    y : CUDA array
        softmax's output. Both may be strided by rows (last dimension contiguous).
    dim : int
        Must name the last dimension, as for :func:`softmax`.
    out : CUDA array, optional
        Result buffer of y's shape and dtype; may be grad itself (in place).
    stream : int or stream object, optional (see ``aotkernels.ops``)

    Returns
    -------
    The gradient of x (``out`` when given): f32 math (the row sum is a fixed-order tree, so
    results are bitwise repeatable), rounded once to y's dtype. NaN anywhere in a row of grad
    or y makes that row NaN.
    """
    return SOFTMAX_BACKWARD(grad, y, dim=dim, out=out, stream=stream)
