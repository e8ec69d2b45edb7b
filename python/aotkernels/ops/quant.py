"""fp8 outputs: the norms and silu_and_mul with the quantization fused into their store, and the
standalone ``quantize_fp8``. Needs the hardware fp8 conversions (compute capability 8.9+).

Convention (vLLM's): the op's f32 result ``y`` (never rounded to the input dtype) becomes

    q = fp8(clamp(y * (1 / scale), -fp8_max, fp8_max))     rounded to nearest even

with fp8_max 448 (float8_e4m3fn) or 57344 (float8_e5m2); infinities saturate, NaN stays NaN.
``y * (1 / scale)`` differs from ``y / scale`` by at most one f32 ulp, so q equals
``(y / scale).clamp(-max, max).to(float8)`` except where that quotient lies within an ulp of a
rounding tie. Dequantize with ``q.float() * scale``.

Scales are float32:
  * static, per tensor: ``scale=`` one element, given;
  * dynamic per row (the default of the norms, ``per_token=True``):
    ``scale[r] = max(amax_r, 1e-10) / fp8_max``, amax_r = max |y| over row r (the floor keeps
    an all-zero row's scale finite), returned with shape ``(*x.shape[:-1], 1)``;
  * dynamic per 1 x group_size group (``quantize_fp8(x, group_size=128)``): the same rule over
    each group of a row, returned with shape ``(*x.shape[:-1], ceil(K / group_size))``,
    row-major: for [M, K] exactly the (M, ceil(K/128)) ``scale_a`` that ``scaled_mm`` takes
    for DeepSeek-style block scaling;
  * dynamic per tensor (``quantize_fp8(x)``): the rule over the whole array, shape (1,). It
    runs four launches on the returned scale (zero it, atomicMax the row maxima into it,
    quantize, turn the amax into the scale).
NaN elements do not enter amax (they stay NaN in q).

Launch configuration: the rows run on the row engine of the norm family with its launch
heuristic (``_rowwise.rowwise_config``): a pure function of (rows, row length, item size, SM
count, whether 16-byte accesses apply).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

from .. import device as _device
from ..arrays import ITEMSIZE, ArrayInfo, dtype_name, framework_of
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
    rows_view,
)
from ._rowwise import (
    check_eps,
    joint_layout2,
    row_layout,
    row_layout2,
    rowwise_config,
    same_dtype,
    vector_operand,
)

__all__ = ["FP8_MAX", "fp8_out_dtype", "norm_fp8", "quantize_fp8", "silu_and_mul_fp8"]

FAMILY = "quant"
IN_DTYPES = ("f32", "f16", "bf16")
FP8_MAX = {"fp8_e4m3": 448.0, "fp8_e5m2": 57344.0}
MIN_AMAX = 1e-10  # kMinAmax in kernels/quant/quant.cuh
# ak_quant_params.flags and .mode (kernels/quant/quant.cuh)
_HAS_WEIGHT, _HAS_BIAS, _GEMMA, _E5M2 = 1, 2, 4, 8
_STATIC, _PER_ROW, _AMAX, _FROM_AMAX, _ZERO, _FINAL = 0, 1, 2, 3, 4, 5


class Geometry(NamedTuple):
    """Rows of a launch: row r of ``cols`` elements (``tail`` for the last group of a row)
    starts at ``(r // inner) * outer + (r % inner) * stride`` (``r * stride`` with
    ``inner <= 1``) in x, out and residual."""

    rows: int
    cols: int
    inner: int
    tail: int
    x: tuple[int, int]  # (row stride, outer stride), elements
    out: tuple[int, int]
    res: int = 0  # residual row stride (one level)


def _parse(op: str, arg: str, value: Any) -> str:
    from .gemm import parse_dtype

    return parse_dtype(op, arg, value)


def fp8_out_dtype(op: str, x: Any, out_dtype: Any, scale: Any) -> str | None:
    """The fp8 output dtype asked for, or None for the op's own dtype (x's, checked)."""
    dt = None if out_dtype is None else _parse(op, "out_dtype", out_dtype)
    if dt in FP8_MAX:
        return dt
    if scale is not None:
        raise TypeError(
            f"{op}: scale is only taken with an fp8 out_dtype (float8_e4m3fn or float8_e5m2), "
            f"got out_dtype={out_dtype!r}"
        )
    if dt is not None:
        xdt = framework_of(x, op, "x").info(x, op, "x", 0).dtype
        if dt != xdt:
            raise TypeError(
                f"{op}: out_dtype must be {dtype_name(xdt)} (the dtype of x), float8_e4m3fn "
                f"or float8_e5m2, got {dtype_name(dt)}"
            )
    return None


def _check_fp8_device(op: str, call: Call) -> None:
    cc = _device.device_info(call.x.device).cc
    if cc < (8, 9):
        raise NotImplementedError(
            f"{op}: fp8 outputs need compute capability 8.9 or newer (hardware fp8 "
            f"conversions), got cuda:{call.x.device} with {cc[0]}.{cc[1]}"
        )


def _static_scale(op: str, scale: Any, call: Call) -> ArrayInfo:
    """A per-tensor scale: float32, one element, on x's device."""
    si = operand(op, "scale", scale, call)
    if si.dtype != "f32":
        raise TypeError(f"{op}: scale.dtype must be float32, got {dtype_name(si.dtype)}")
    if math.prod(si.shape) != 1:
        raise ValueError(
            f"{op}: scale must hold one element (a per-tensor scale, shape () or (1,)), got "
            f"shape {tuple(si.shape)}"
        )
    return si


def _flags(fp8: str, weight: bool, bias: bool, gemma: bool) -> int:
    return ((_HAS_WEIGHT if weight else 0) | (_HAS_BIAS if bias else 0)
            | (_GEMMA if gemma else 0) | (_E5M2 if fp8 == "fp8_e5m2" else 0))  # fmt: skip


def launch_config(
    g: Geometry, itemsize: int, ptrs: tuple[int, ...], sm_count: int
) -> tuple[tuple[int, int], tuple[int, int], int]:
    """(grid, block, vecs_per_thread) of one row launch. 16-byte accesses need what
    ``vectorizable`` in kernels/common/ak/reduce.cuh tests: rows (and a group tail) of whole
    packets, 16-byte aligned pointers, row and outer strides of whole packets."""
    v = 16 // itemsize
    strides = [g.x[0], g.out[0], g.res] + ([g.x[1], g.out[1]] if g.inner > 1 else [])
    vec = (
        g.cols % v == 0
        and g.tail % v == 0
        and all(p % 16 == 0 for p in ptrs)
        and (g.rows <= 1 or all(s % v == 0 for s in strides))
    )
    cfg = rowwise_config(g.rows, g.cols, itemsize, sm_count, vec)
    return cfg.grid, cfg.block, cfg.vecs_per_thread


def _run(
    op: str,
    call: Call,
    out: ArrayInfo,
    residual: ArrayInfo | None,
    weight_ptr: int,
    bias: ArrayInfo | None,
    g: Geometry,
    eps: float,
    flags: int,
    mode: int,
    scale_ptr: int,
    scale_out_ptr: int,
) -> None:
    """Launch ``ak_fp8_<op>_<dtype>`` over ``g``. Rows of 0 elements still get their dynamic
    scales (the floor); a per-tensor scale of an empty array too."""
    xi = call.x
    symbol = f"ak_fp8_{op}_{xi.dtype}"
    ptrs = (out.ptr, xi.ptr, residual.ptr if residual else 0, weight_ptr, bias.ptr if bias else 0)
    sms = _device.device_info(xi.device).sm_count
    grid, block, vpt = launch_config(g, ITEMSIZE[xi.dtype], ptrs, sms)

    def plan(mode: int, grid: tuple[int, int], block: tuple[int, int]) -> Any:
        return make_plan(FAMILY, symbol, xi.device, grid, block, *ptrs, scale_ptr, scale_out_ptr,
                         g.rows, g.cols, g.inner, g.tail, g.x[0], g.out[0], g.res, g.x[1],
                         g.out[1], eps, flags, mode, vpt)  # fmt: skip

    empty = g.rows == 0 or g.cols == 0
    if mode == _AMAX:  # per tensor: zero the amax, reduce into it, quantize with it, finish
        plan(_ZERO, (1, 1), (32, 1))(call.stream)
        if not empty:
            plan(_AMAX, grid, block)(call.stream)
            plan(_FROM_AMAX, grid, block)(call.stream)
        plan(_FINAL, (1, 1), (32, 1))(call.stream)
    elif g.rows and not (empty and mode == _STATIC):
        plan(mode, grid, block)(call.stream)


def _scales(
    op: str, call: Call, scale: Any, si: ArrayInfo | None, lead: tuple[int, ...], groups: int | None
) -> tuple[Any, ArrayInfo, int, int, int]:
    """(returned scale, its info, mode, scale ptr, scale_out ptr) for a static ``scale`` (``si``
    its checked info), or a new f32 array of ``(*lead, groups)`` dynamic scales (``groups``
    None: per tensor, (1,)). Every argument is validated by now: the device must take fp8."""
    _check_fp8_device(op, call)
    if si is not None:
        return scale, si, _STATIC, si.ptr, 0
    shape = (1,) if groups is None else (*lead, groups)
    res = call.x.fw.empty(call.x, shape, "f32")
    info = _info(op, call, res, shape)
    if groups is None:
        return res, info, _AMAX, info.ptr, 0
    return res, info, _PER_ROW, 0, info.ptr


def _info(op: str, call: Call, obj: Any, shape: tuple[int, ...]) -> ArrayInfo:
    fw = call.x.fw
    if fw.name in ("torch", "cupy"):
        return fw.info(obj, op, "scale", call.stream)
    from ..arrays import contiguous_strides

    return ArrayInfo(obj, obj.ptr, shape, contiguous_strides(shape), "f32", call.x.device, fw)


def _finish_all(call: Call, allocated: bool, q: Any, scale: Any, dynamic: bool) -> tuple[Any, Any]:
    q = finish(call, q, allocated)
    return q, (finish(call, scale, True) if dynamic else scale)


def _output(
    op: str, call: Call, out: Any, shape: tuple[int, ...], fp8: str
) -> tuple[Any, ArrayInfo]:
    """``output`` for an fp8 result, the device's fp8 support checked before the allocation
    (a given out= is checked in full first; ``_scales`` checks the device again)."""
    if out is None:
        _check_fp8_device(op, call)
    return output(op, call, out, shape, fp8)


def _start(op: str, x: Any, stream: Any) -> Call:
    call = prepare(op, x, stream)
    check_dtype(op, "x", call.x, IN_DTYPES)
    if not call.x.shape:
        raise ValueError(f"{op}: x must have at least 1 dimension, got a 0-d array")
    return call


def norm_fp8(
    op: str,
    x: Any,
    residual: Any,
    weight: Any,
    bias: Any,
    eps: Any,
    gemma: Any,
    fp8: str,
    scale: Any,
    out: Any,
    stream: Any,
) -> Any:
    """rms_norm / fused_add_rms_norm / layer_norm with an fp8 output (see the norm module):
    ``(q, scale)``, for fused_add_rms_norm ``(q, residual, scale)`` (x is not written)."""
    if not isinstance(gemma, bool):
        raise TypeError(f"{op}: gemma must be a bool, got {type(gemma).__name__}")
    call = _start(op, x, stream)
    xi = call.x
    hidden = xi.shape[-1]
    rows, x_rs = row_layout(op, "x", xi)
    ri = None
    r_rs = 0
    if residual is not None:
        ri = operand(op, "residual", residual, call)
        same_dtype(op, "residual", ri, xi)
        if not ri.fw.mutable:
            raise TypeError(
                f"{op}: residual must be a mutable array (the op writes it in place), got an "
                f"immutable {ri.fw.name} array"
            )
        if tuple(ri.shape) != tuple(xi.shape):
            raise ValueError(
                f"{op}: residual.shape must be {tuple(xi.shape)} (the shape of x), got "
                f"{tuple(ri.shape)}"
            )
        _, r_rs = row_layout(op, "residual", ri)
        check_rows_disjoint(op, "residual", rows, hidden, r_rs)
        check_disjoint(op, "residual", ri, "x", xi)
    wi = None if weight is None and op == "layer_norm" else vector_operand(
        op, "weight", weight, call, hidden)  # fmt: skip
    bi = None if bias is None else vector_operand(op, "bias", bias, call, hidden)
    eps_f = check_eps(op, eps)
    si = None if scale is None else _static_scale(op, scale, call)
    if si is not None and ri is not None:
        check_disjoint(op, "residual", ri, "scale", si)
    res, oi = _output(op, call, out, tuple(xi.shape), fp8)
    o_rs = hidden
    if out is not None:
        _, o_rs = row_layout(op, "out", oi)
        check_rows_disjoint(op, "out", rows, hidden, o_rs)
        for name, info in (("x", xi), ("residual", ri), ("weight", wi), ("bias", bi)):
            if info is not None:
                check_disjoint(op, "out", oi, name, info)
    if ri is not None:
        for name, info in (("weight", wi), ("bias", bi)):
            if info is not None:
                check_disjoint(op, "residual", ri, name, info)
    sc, _, mode, s_ptr, s_out = _scales(op, call, scale, si, tuple(xi.shape[:-1]), 1)
    g = Geometry(rows, hidden, 0, hidden, (x_rs, 0), (o_rs, 0), r_rs)
    flags = _flags(fp8, wi is not None, bi is not None, gemma)
    _run(op, call, oi, ri, wi.ptr if wi else 0, bi, g, eps_f, flags, mode, s_ptr, s_out)
    q, scale_res = _finish_all(call, out is None, res, sc, mode != _STATIC)
    if residual is not None:
        return q, residual, scale_res
    return q, scale_res


def silu_and_mul_fp8(x: Any, fp8: str, scale: Any, out: Any, stream: Any) -> Any:
    """``silu(x[..., :d]) * x[..., d:]`` quantized to fp8: ``(q, scale)``."""
    op = "silu_and_mul"
    call = _start(op, x, stream)
    xi = call.x
    if xi.shape[-1] % 2:
        raise ValueError(
            f"{op}: x.shape[-1] must be even (x is [..., 2d]), got shape {tuple(xi.shape)}"
        )
    d = xi.shape[-1] // 2
    rows = math.prod(xi.shape[:-1])
    x_rows, _, x_rs = rows_view(op, "x", xi)
    x_rs = x_rs if x_rows == rows else 2 * d  # contiguous: split at the last dim
    si = None if scale is None else _static_scale(op, scale, call)
    res, oi = _output(op, call, out, (*xi.shape[:-1], d), fp8)
    o_rs = d
    if out is not None:
        o_rows, _, o_rs = rows_view(op, "out", oi)
        o_rs = o_rs if o_rows == rows else d
        check_rows_disjoint(op, "out", rows, d, o_rs)
        check_disjoint(op, "out", oi, "x", xi)
    sc, _, mode, s_ptr, s_out = _scales(op, call, scale, si, tuple(xi.shape[:-1]), 1)
    g = Geometry(rows, d, 0, d, (x_rs, 0), (o_rs, 0))
    up = xi.ptr + d * ITEMSIZE[xi.dtype]  # the up half rides in the weight slot, per row
    _run(op, call, oi, None, up, None, g, 0.0, _flags(fp8, True, False, False), mode, s_ptr, s_out)
    return _finish_all(call, out is None, res, sc, mode != _STATIC)


def quantize_fp8(
    x: Any,
    scale: Any = None,
    per_token: bool = False,
    group_size: int | None = None,
    *,
    out_dtype: Any = "float8_e4m3fn",
    out: Any = None,
    stream: Any = None,
) -> tuple[Any, Any]:
    """``q = fp8(clamp(x / scale, -fp8_max, fp8_max))`` (round to nearest even): ``(q, scale)``.

    Parameters
    ----------
    x : CUDA array, float32 / float16 / bfloat16, shape [..., K]
        Last dimension contiguous; leading dimensions may have up to two independent strides
        (one for ``group_size``).
    scale : CUDA array, optional
        float32, one element: static per-tensor quantization. Without it the scale is dynamic:
        per tensor (default), per row (``per_token=True``) or per 1 x ``group_size`` group.
    per_token : bool
        Dynamic scales ``max(max |x_row|, 1e-10) / fp8_max``, shape ``(*x.shape[:-1], 1)``.
    group_size : int, optional
        Dynamic scales per group of ``group_size`` consecutive elements of a row, shape
        ``(*x.shape[:-1], ceil(K / group_size))`` row-major (the last group may be short);
        ``group_size=128`` on [M, K] gives ``scaled_mm``'s 1x128 block ``scale_a``.
    out_dtype : ``float8_e4m3fn`` (default) or ``float8_e5m2``
    out : CUDA array, optional
        Result buffer of x's shape and out_dtype.
    stream : int or stream object, optional

    Returns
    -------
    (q, scale): q in out_dtype; scale the given one (static) or a new float32 array.
    """
    op = "quantize_fp8"
    fp8 = _parse(op, "out_dtype", out_dtype)
    if fp8 not in FP8_MAX:
        raise TypeError(
            f"{op}: out_dtype must be float8_e4m3fn or float8_e5m2, got {dtype_name(fp8)}"
        )
    if not isinstance(per_token, bool):
        raise TypeError(f"{op}: per_token must be a bool, got {type(per_token).__name__}")
    if group_size is not None and (
        isinstance(group_size, bool) or not isinstance(group_size, numbers.Integral)
    ):
        raise TypeError(f"{op}: group_size must be an int or None, got {type(group_size).__name__}")
    if group_size is not None and group_size < 1:
        raise ValueError(f"{op}: group_size must be >= 1, got {group_size}")
    picked = sum((scale is not None, per_token, group_size is not None))
    if picked > 1:
        raise ValueError(
            f"{op}: give at most one of scale (static), per_token=True and group_size, got "
            f"scale={'set' if scale is not None else None}, per_token={per_token}, "
            f"group_size={group_size}"
        )
    call = _start(op, x, stream)
    xi = call.x
    k = xi.shape[-1]
    lead = tuple(xi.shape[:-1])
    _, x_inner, _, _ = row_layout2(op, "x", xi)
    if group_size is not None and x_inner > 1:
        raise ValueError(
            f"{op}: with group_size, x's leading dimensions must collapse into one row "
            f"stride, got strides {tuple(xi.strides)} for shape {tuple(xi.shape)}"
        )
    si = None if scale is None else _static_scale(op, scale, call)
    res, oi = _output(op, call, out, tuple(xi.shape), fp8)
    rows, inner, x_l, o_l = joint_layout2(op, xi, oi, out is None)
    groups = None if not (per_token or group_size) else 1
    g = Geometry(rows, k, inner, k, x_l, o_l)
    if group_size is not None:
        if inner > 1:
            raise ValueError(
                f"{op}: with group_size, out's leading dimensions must collapse into one row "
                f"stride, got strides {tuple(oi.strides)} for shape {tuple(oi.shape)}"
            )
        groups = -(-k // group_size)
        if groups == 0:
            g = Geometry(0, 0, 0, 0, x_l, o_l)  # K == 0: no groups, no scales
        elif groups > 1:  # each group is a row: (m, j) at m * row stride + j * group_size
            g = Geometry(rows * groups, group_size, groups, k - (groups - 1) * group_size,
                         (group_size, x_l[0]), (group_size, o_l[0]))  # fmt: skip
    if out is not None and si is not None:
        check_disjoint(op, "out", oi, "scale", si)
    sc, _, mode, s_ptr, s_out = _scales(op, call, scale, si, lead, groups)
    _run("quantize", call, oi, None, 0, None, g, 0.0, _flags(fp8, False, False, False), mode,
         s_ptr, s_out)  # fmt: skip
    return _finish_all(call, out is None, res, sc, mode != _STATIC)
