"""Row normalizations over the last dimension: rms_norm, fused_add_rms_norm, layer_norm.

f32 / f16 / bf16; weight and bias in x's dtype; f32 accumulation and one rounding on store.
x may be strided by rows (``x[:, :h]``, ``x[::2]``) and start at any element; its last dimension
must be contiguous. rms_norm also takes rows with two independent strides (q or k heads of a
fused QKV buffer, [tokens, heads, head_dim]). ``gemma=True`` applies the weight as
``(1 + weight)`` (Gemma's RMSNorm). ``out_dtype="float8_e4m3fn"`` / ``"float8_e5m2"`` fuses
the fp8 quantization of the result into the store (``aotkernels.ops.quant``). Any hidden size:
rows up to 128 KiB (64 KiB for fused_add_rms_norm, whose residual loads need the registers)
stay in registers (one read, one write); longer rows are streamed twice (three times for
layer_norm) from global memory.
"""

from __future__ import annotations

from typing import Any

from .. import device as _device
from ..arrays import ITEMSIZE, ArrayInfo
from ._common import (
    Call,
    check_disjoint,
    check_dtype,
    check_rows_disjoint,
    finish,
    make_plan,
    operand,
    output,
    prepare,
    remember,
    torch_fast,
)
from ._rowwise import (
    check_eps,
    joint_layout2,
    out_row_stride,
    row_layout,
    row_layout2,
    rowwise_config,
    same_dtype,
    vector_operand,
    vectorizable,
)

__all__ = ["fused_add_rms_norm", "layer_norm", "rms_norm"]

FAMILY = "norm"
DTYPES = ("f32", "f16", "bf16")
_HAS_WEIGHT, _HAS_BIAS, _GEMMA = 1, 2, 4  # ak_norm_params.flags (kernels/norm/norm.cuh)


def _launch(
    kernel: str,
    x: Any,
    out: Any,
    residual: Any,
    weight: Any,
    bias: Any,
    rows: int,
    hidden: int,
    strides: tuple[int, int, int],
    eps: float,
    stream: int,
    key: Any,
    allocated: bool,
    gemma: bool = False,
    inner: int = 0,
    outer: tuple[int, int] = (0, 0),
) -> None:
    """One launch of ``ak_<kernel>_<dtype>``; ``x``/``out``/... are ArrayInfo or None.

    The plan is remembered under ``key`` for the torch fast path (see ``torch_fast``).
    ``strides`` are the row strides of (x, out, residual); with ``inner > 1`` (rms_norm only)
    row r starts at ``(r // inner) * outer + (r % inner) * stride`` for x and out.
    """
    if rows * hidden == 0:
        return  # empty: nothing to read or write, no launch
    item = ITEMSIZE[x.dtype]
    ptrs = [a.ptr if a is not None else 0 for a in (out, x, residual, weight, bias)]
    vec = vectorizable(hidden, item, ptrs, strides + (outer if inner > 1 else ()), rows)
    sms = _device.device_info(x.device).sm_count
    cfg = rowwise_config(rows, hidden, item, sms, vec)
    flags = (_HAS_WEIGHT if weight is not None else 0) | (_HAS_BIAS if bias is not None else 0)
    flags |= _GEMMA if gemma else 0
    plan = make_plan(FAMILY, f"ak_{kernel}_{x.dtype}", x.device, cfg.grid, cfg.block,
                     *ptrs, rows, hidden, inner, *strides, *outer, eps, flags,
                     cfg.vecs_per_thread)  # fmt: skip
    plan(stream)
    written = (0, 2) if residual is not None else (0,)  # fused_add_rms_norm writes residual
    remember(key, plan, (out, x, residual, weight, bias), allocated=allocated, written=written)


def _prepare_rows(op: str, x: Any, stream: Any) -> tuple[Call, ArrayInfo, int, int, int]:
    """The checks every op here starts with: (call, x info, hidden, rows, x row stride)."""
    call = prepare(op, x, stream)
    xi = call.x
    check_dtype(op, "x", xi, DTYPES)
    if not xi.shape:
        raise ValueError(f"{op}: x must have at least 1 dimension, got a 0-d array")
    rows, x_rs = row_layout(op, "x", xi)
    return call, xi, xi.shape[-1], rows, x_rs


def rms_norm(
    x: Any,
    weight: Any,
    eps: float = 1e-6,
    *,
    gemma: bool = False,
    out_dtype: Any = None,
    scale: Any = None,
    out: Any = None,
    stream: Any = None,
) -> Any:
    """``out = x * rsqrt(mean(x**2, -1) + eps) * weight`` over the last dimension.

    Parameters
    ----------
    x : CUDA array, float32 / float16 / bfloat16, shape [..., hidden]
        Last dimension contiguous; leading dimensions may be strided by rows, with up to two
        independent strides (q/k norm on ``qkv[:, :q_size].view(T, H, D)``).
    weight : CUDA array, shape (hidden,), same dtype and device as x, contiguous.
    eps : float
        Added to the mean square before the reciprocal square root.
    gemma : bool
        Apply the weight as ``(1 + weight)`` (Gemma's RMSNorm).
    out_dtype : dtype, optional
        x's dtype (default), or ``float8_e4m3fn`` / ``float8_e5m2``: the result is quantized
        on store and the call returns ``(q, scale)`` (see ``aotkernels.ops.quant``).
    scale : CUDA array, optional
        fp8 only: a float32 per-tensor scale of one element (static quantization). Without it
        the scales are dynamic, one per row.
    out : CUDA array, optional
        Result buffer of x's shape and the output dtype; may be x itself (in place).
    stream : int or stream object, optional
        Defaults to the current stream of x's framework.

    Returns
    -------
    The normalized array (``out`` when given), in x's framework. Accumulation is f32 and the
    result is rounded once to x's dtype. With an fp8 out_dtype: ``(q, scale)``.
    """
    op = "rms_norm"
    if out_dtype is not None or scale is not None:
        from . import quant

        fp8 = quant.fp8_out_dtype(op, x, out_dtype, scale)
        if fp8 is not None:
            return quant.norm_fp8(op, x, None, weight, None, eps, gemma, fp8, scale, out, stream)
    gemma = _check_gemma(op, gemma)
    res, key = torch_fast("ak_rms_norm_", out, (x, None, weight, None), stream, (eps, gemma))
    if res is not None:
        return res
    call = prepare(op, x, stream)
    xi = call.x
    check_dtype(op, "x", xi, DTYPES)
    if not xi.shape:
        raise ValueError(f"{op}: x must have at least 1 dimension, got a 0-d array")
    hidden = xi.shape[-1]
    row_layout2(op, "x", xi)  # layout errors before anything is allocated
    wi = vector_operand(op, "weight", weight, call, hidden)
    eps_f = check_eps(op, eps)
    res, oi = output(op, call, out, xi.shape, xi.dtype)
    rows, inner, (x_rs, x_outer), (o_rs, o_outer) = joint_layout2(op, xi, oi, out is None)
    if out is not None:
        check_disjoint(op, "out", oi, "weight", wi)
    _launch(op, xi, oi, None, wi, None, rows, hidden, (x_rs, o_rs, 0), eps_f, call.stream,
            key, out is None, gemma, inner, (x_outer, o_outer))  # fmt: skip
    return finish(call, res, out is None)


def _check_gemma(op: str, gemma: Any) -> bool:
    if not isinstance(gemma, bool):
        raise TypeError(f"{op}: gemma must be a bool, got {type(gemma).__name__}")
    return gemma


def fused_add_rms_norm(
    x: Any,
    residual: Any,
    weight: Any,
    eps: float = 1e-6,
    *,
    gemma: bool = False,
    out_dtype: Any = None,
    scale: Any = None,
    out: Any = None,
    stream: Any = None,
) -> Any:
    """``residual += x; x = rms_norm(residual, weight, eps)``, both in place.

    The vLLM / FlashInfer convention: the sum ``x + residual`` is computed in f32, rounded to
    the storage dtype and written to ``residual``; that rounded value is what gets normalized
    (``x = residual * rsqrt(mean(residual**2, -1) + eps) * weight``, rounded once).

    Parameters
    ----------
    x : CUDA array, float32 / float16 / bfloat16, shape [..., hidden]
        Overwritten with the normalized result. Must be a mutable array (not JAX).
    residual : CUDA array, same shape, dtype and device as x
        Overwritten with ``x + residual``. Must not overlap x.
    weight : CUDA array, shape (hidden,), same dtype and device as x, contiguous.
    eps : float
    gemma : bool
        Apply the weight as ``(1 + weight)`` (Gemma's RMSNorm).
    out_dtype, scale, out : optional
        ``out_dtype="float8_e4m3fn"`` / ``"float8_e5m2"``: x is left unchanged, the
        normalized sum is quantized into a new fp8 array (or ``out``) and the call returns
        ``(q, residual, scale)``; ``scale`` as in ``rms_norm``. Otherwise ``out`` must be None.
    stream : int or stream object, optional

    Returns
    -------
    (x, residual) : the two inputs, updated.
    """
    op = "fused_add_rms_norm"
    if out_dtype is not None or scale is not None or out is not None:
        from . import quant

        fp8 = quant.fp8_out_dtype(op, x, out_dtype, scale)
        if fp8 is not None:
            return quant.norm_fp8(op, x, residual, weight, None, eps, gemma, fp8, scale, out,
                                  stream)  # fmt: skip
        if out is not None:
            raise ValueError(f"{op}: out must be None (x is the output) without an fp8 out_dtype")
    gemma = _check_gemma(op, gemma)
    hit, key = torch_fast("ak_fused_add_rms_norm_", x, (x, residual, weight, None), stream,
                          (eps, gemma))  # fmt: skip
    if hit is not None:
        return x, residual
    call = prepare(op, x, stream)
    xi = call.x
    check_dtype(op, "x", xi, DTYPES)
    if not xi.fw.mutable:
        raise TypeError(
            f"{op}: x must be a mutable array (the op writes x and residual in place), got an "
            f"immutable {xi.fw.name} array"
        )
    if not xi.shape:
        raise ValueError(f"{op}: x must have at least 1 dimension, got a 0-d array")
    hidden = xi.shape[-1]
    ri = operand(op, "residual", residual, call)
    same_dtype(op, "residual", ri, xi)
    if tuple(ri.shape) != tuple(xi.shape):
        raise ValueError(
            f"{op}: residual.shape must be {tuple(xi.shape)} (the shape of x), got "
            f"{tuple(ri.shape)}"
        )
    rows, x_rs = row_layout(op, "x", xi)
    _, r_rs = row_layout(op, "residual", ri)
    check_rows_disjoint(op, "x", rows, hidden, x_rs)
    check_rows_disjoint(op, "residual", rows, hidden, r_rs)
    check_disjoint(op, "residual", ri, "x", xi)
    wi = vector_operand(op, "weight", weight, call, hidden)
    check_disjoint(op, "x", xi, "weight", wi)
    check_disjoint(op, "residual", ri, "weight", wi)
    eps_f = check_eps(op, eps)
    _launch(op, xi, xi, ri, wi, None, rows, hidden, (x_rs, x_rs, r_rs), eps_f, call.stream,
            key, False, gemma)  # fmt: skip
    return x, residual


def layer_norm(
    x: Any,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
    *,
    out_dtype: Any = None,
    scale: Any = None,
    out: Any = None,
    stream: Any = None,
) -> Any:
    """``out = (x - mean) * rsqrt(var + eps) * weight + bias`` over the last dimension.

    ``var`` is the biased variance (mean of ``(x - mean)**2``), as in ``torch.nn.functional
    .layer_norm``; it is computed from the centred values, not as ``E[x**2] - mean**2``.

    Parameters
    ----------
    x : CUDA array, float32 / float16 / bfloat16, shape [..., hidden]
    weight, bias : CUDA arrays of shape (hidden,), x's dtype and device, contiguous; optional
        (absent: 1 and 0).
    eps : float
    out_dtype, scale : optional
        fp8 output and its scale, as in ``rms_norm`` (the call then returns ``(q, scale)``).
    out : CUDA array, optional
        Result buffer of x's shape and the output dtype; may be x itself (in place).
    stream : int or stream object, optional

    Returns
    -------
    The normalized array (``out`` when given), in x's framework.
    """
    op = "layer_norm"
    if out_dtype is not None or scale is not None:
        from . import quant

        fp8 = quant.fp8_out_dtype(op, x, out_dtype, scale)
        if fp8 is not None:
            return quant.norm_fp8(op, x, None, weight, bias, eps, False, fp8, scale, out, stream)
    res, key = torch_fast("ak_layer_norm_", out, (x, None, weight, bias), stream, eps)
    if res is not None:
        return res
    call, xi, hidden, rows, x_rs = _prepare_rows(op, x, stream)
    wi = None if weight is None else vector_operand(op, "weight", weight, call, hidden)
    bi = None if bias is None else vector_operand(op, "bias", bias, call, hidden)
    eps_f = check_eps(op, eps)
    res, oi = output(op, call, out, xi.shape, xi.dtype)
    o_rs = out_row_stride(op, xi, oi, rows, hidden, out is None)
    if out is not None:
        for name, info in (("weight", wi), ("bias", bi)):
            if info is not None:
                check_disjoint(op, "out", oi, name, info)
    _launch(op, xi, oi, None, wi, bi, rows, hidden, (x_rs, o_rs, 0), eps_f, call.stream,
            key, out is None)  # fmt: skip
    return finish(call, res, out is None)
