"""Softmax over the last dimension, f32 / f16 / bf16, f32 math and one rounding on store.

Rows may be strided (``x[:, :h]``) and start at any element; the last dimension must be
contiguous. Rows up to 128 KiB stay in registers; longer rows are streamed three times (max, sum,
store).
"""

from __future__ import annotations

import operator
from typing import Any

from .. import device as _device
from ..arrays import ITEMSIZE
from ._common import (
    check_dtype,
    finish,
    make_plan,
    output,
    prepare,
    remember,
    torch_fast1,
)
from ._rowwise import out_row_stride, row_layout, rowwise_config, vectorizable

__all__ = ["softmax"]

FAMILY = "softmax"
DTYPES = ("f32", "f16", "bf16")


def _last_dim(op: str, dim: Any, shape: tuple[int, ...]) -> None:
    """Only the last dimension is implemented; anything else is refused with the way out."""
    if isinstance(dim, bool):
        raise TypeError(f"{op}: dim must be an int, got bool")
    try:
        d = operator.index(dim)
    except TypeError:
        raise TypeError(f"{op}: dim must be an int, got {type(dim).__name__}") from None
    nd = max(len(shape), 1)
    if not -nd <= d < nd:
        raise ValueError(f"{op}: dim must be in [{-nd}, {nd - 1}] for shape {shape}, got {dim}")
    if d % nd != nd - 1:
        raise NotImplementedError(
            f"{op}: dim must be the last dimension (-1 or {nd - 1}), got dim={dim} for shape "
            f"{shape}; move that dimension last and pass a contiguous copy"
        )


def softmax(x: Any, dim: int = -1, *, out: Any = None, stream: Any = None) -> Any:
    """``out = exp(x - max(x)) / sum(exp(x - max(x)))`` along the last dimension.

    Numerically safe (the row maximum is subtracted first). NaN anywhere in a row makes the
    whole row NaN. A row that is entirely ``-inf`` (fully masked) gives **0** everywhere: the
    safe-softmax convention of RELIABILITY.md #11, where ``torch.softmax`` returns NaN.

    Parameters
    ----------
    x : CUDA array, float32 / float16 / bfloat16
        Any rank (0-d is one row of one element); last dimension contiguous.
    dim : int
        Must name the last dimension (``-1`` or ``x.ndim - 1``); other dimensions raise
        ``NotImplementedError``.
    out : CUDA array, optional
        Result buffer of x's shape and dtype; may be x itself (in place).
    stream : int or stream object, optional
        Defaults to the current stream of x's framework.

    Returns
    -------
    The probabilities (``out`` when given), in x's dtype and framework.
    """
    op = "softmax"
    res, key = torch_fast1("ak_softmax_", out, x, stream, dim)
    if res is not None:
        return res
    call = prepare(op, x, stream)
    xi = call.x
    check_dtype(op, "x", xi, DTYPES)
    shape = tuple(xi.shape)
    _last_dim(op, dim, shape)
    cols = shape[-1] if shape else 1
    rows, x_rs = row_layout(op, "x", xi)
    res, oi = output(op, call, out, shape, xi.dtype)
    o_rs = out_row_stride(op, xi, oi, rows, cols, out is None)
    if rows * cols:
        item = ITEMSIZE[xi.dtype]
        vec = vectorizable(cols, item, (oi.ptr, xi.ptr), (x_rs, o_rs), rows)
        sms = _device.device_info(xi.device).sm_count
        cfg = rowwise_config(rows, cols, item, sms, vec)
        plan = make_plan(FAMILY, f"ak_softmax_{xi.dtype}", xi.device, cfg.grid, cfg.block,
                         oi.ptr, xi.ptr, rows, cols, x_rs, o_rs, cfg.vecs_per_thread)  # fmt: skip
        plan(call.stream)
        remember(key, plan, (oi, xi), allocated=out is None)
    return finish(call, res, out is None)
