"""fp8 outputs: the norms and silu_and_mul with the quantization fused into their store, and the
standalone ``quantize_fp8``. Needs the hardware fp8 conversions (compute capability 8.9+).

Convention (vLLM's): the op's f32 result ``y`` (never rounded to the input dtype) becomes

    q = fp8(clamp(y * (1 / scale), -fp8_max, fp8_max))     rounded to nearest even

with fp8_max 448 (float8_e4m3fn) or 57344 (float8_e5m2); infinities saturate, NaN stays NaN.
``y * (1 / scale)`` differs from ``y / scale`` by at most one f32 ulp, so q equals
``(y / scale).clamp(-max, max).to(float8)`` except where that quotient lies within an ulp of a
rounding tie. Dequantize with ``q.float() * scale``.

Scales are float32:
  * static, per tensor: ``scale=`` one element, given (ops ``*_fp8``);
  * dynamic per row (the norms' default, ``per_token=True``): ``scale[r] = max(amax_r, 1e-10)
    / fp8_max``, amax_r = max |y| over row r (the floor keeps an all-zero row's scale finite),
    shape ``(*x.shape[:-1], 1)`` (ops ``*_fp8_dynamic``);
  * dynamic per 1 x group_size group (``quantize_fp8(x, group_size=128)``): the same rule over
    each group of a row, shape ``(*x.shape[:-1], ceil(K / group_size))``, row-major: for
    [M, K] exactly the (M, ceil(K/128)) ``scale_a`` that ``scaled_mm`` takes for DeepSeek-style
    block scaling;
  * dynamic per tensor (``quantize_fp8(x)``): the rule over the whole array, shape (1,); four
    launches on the returned scale (zero it, atomicMax the row maxima into it, quantize, turn
    the amax into the scale).
NaN elements do not enter amax (they stay NaN in q).

Launch configuration: the rows run on the row engine of the norm family with its heuristic
(``_rowwise.rowwise_config``), a pure function of (rows, row length, item size, SM count,
whether 16-byte accesses apply).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from .. import device as _device
from .. import loader as _loader
from ..arrays import ITEMSIZE, dtype_name
from ..dtypes import FP8
from ._op import (
    Args,
    Attr,
    Launch,
    Meta,
    Op,
    Output,
    OutSpec,
    Tensor,
    check_dtype,
    parse_dtype,
    row_layout,
    rows_view,
)
from ._rowwise import (
    check_eps,
    joint_layout2,
    norm_flags,
    residual_operand,
    row_layout2,
    rowwise_config,
    vector_operand,
)

__all__ = ["fp8_out_dtype", "norm_fp8", "quantize_fp8", "silu_and_mul_fp8"]

FAMILY = "quant"

_OUT_DTYPE = Attr("out_dtype", "dtype?", None)  # None: float8_e4m3fn
_EPS = Attr("eps", "float", 1e-6)
_GEMMA_ATTR = Attr("gemma", "bool", False)


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


# --- checks (pure: they also run as torch's fake implementations) -------------------------------


def fp8_out_dtype(op: str, x: Any, out_dtype: Any, scale: Any) -> str | None:
    """The fp8 output dtype asked for, or None for the op's own dtype (x's, checked)."""
    dt = None if out_dtype is None else parse_dtype(op, "out_dtype", out_dtype)
    if dt in FP8:
        return dt
    if scale is not None:
        raise TypeError(
            f"{op}: scale is only taken with an fp8 out_dtype (float8_e4m3fn or float8_e5m2), "
            f"got out_dtype={out_dtype!r}"
        )
    if dt is not None:
        try:  # the array's dtype attribute: no data access (also under torch.compile)
            xname = parse_dtype(op, "x.dtype", x.dtype)
        except (AttributeError, TypeError):
            xname = None  # not a dtype we know: the op itself names it
        if dt != xname:
            raise TypeError(
                f"{op}: out_dtype must be {dtype_name(xname or '?')} (the dtype of x), "
                f"float8_e4m3fn or float8_e5m2, got {dtype_name(dt)}"
            )
    return None


def _fp8(a: Args) -> str:
    dt = a.attr("out_dtype") or "fp8_e4m3"
    if dt not in FP8:
        raise TypeError(
            f"{a.op}: out_dtype must be float8_e4m3fn or float8_e5m2, got {dtype_name(dt)}"
        )
    return str(dt)


def _x(a: Args) -> Meta:
    x = a.need("x")
    check_dtype(a.op, "x", x, _loader.dtypes(FAMILY))
    if not x.shape:
        raise ValueError(f"{a.op}: x must have at least 1 dimension, got a 0-d array")
    return x


def _static_scale(a: Args) -> None:
    """A per-tensor scale: float32, one element (on x's device: the runner checks it)."""
    if "scale" not in a.names:
        return
    s = a.need("scale")
    if s.dtype != "f32":
        raise TypeError(f"{a.op}: scale.dtype must be float32, got {dtype_name(s.dtype)}")
    if math.prod(s.shape) != 1:
        raise ValueError(
            f"{a.op}: scale must hold one element (a per-tensor scale, shape () or (1,)), got "
            f"shape {tuple(s.shape)}"
        )


def _dynamic(a: Args) -> bool:
    return "scale" not in a.names


def _norm_shapes(a: Args) -> tuple[OutSpec, ...]:
    x = _x(a)
    hidden = x.shape[-1]
    row_layout(a.op, "x", x)  # one row stride (two levels: rms_norm in x's own dtype only)
    check_eps(a.op, a.attr("eps"))
    if "residual" in a.names:
        residual_operand(a, x)
    vector_operand(a, "weight", hidden)
    if "bias" in a.names:
        vector_operand(a, "bias", hidden)
    _static_scale(a)
    q = OutSpec(x.shape, _fp8(a))
    return (q, OutSpec((*x.shape[:-1], 1), "f32")) if _dynamic(a) else (q,)


def _silu_shapes(a: Args) -> tuple[OutSpec, ...]:
    x = _x(a)
    if x.shape[-1] % 2:
        raise ValueError(
            f"{a.op}: x.shape[-1] must be even (x is [..., 2d]), got shape {tuple(x.shape)}"
        )
    rows_view(a.op, "x", x)
    _static_scale(a)
    q = OutSpec((*x.shape[:-1], x.shape[-1] // 2), _fp8(a))
    return (q, OutSpec((*x.shape[:-1], 1), "f32")) if _dynamic(a) else (q,)


def _quantize_shapes(a: Args) -> tuple[OutSpec, ...]:
    x = _x(a)
    fp8 = _fp8(a)
    _static_scale(a)
    _, inner, _, _ = row_layout2(a.op, "x", x)
    if _dynamic(a):
        per_token, group = a.attr("per_token"), a.attr("group_size")
        if group < 0:
            raise ValueError(f"{a.op}: group_size must be >= 1, got {group}")
        if per_token and group:
            raise ValueError(
                f"{a.op}: give at most one of per_token=True and group_size, got "
                f"per_token=True, group_size={group}"
            )
        if group and inner > 1:
            raise ValueError(
                f"{a.op}: with group_size, x's leading dimensions must collapse into one row "
                f"stride, got strides {tuple(x.strides)} for shape {tuple(x.shape)}"
            )
        lead = tuple(x.shape[:-1])
        shape = (*lead, -(-x.shape[-1] // group)) if group else (*lead, 1) if per_token else (1,)
        return OutSpec(x.shape, fp8), OutSpec(shape, "f32")
    return (OutSpec(x.shape, fp8),)


# --- launches --------------------------------------------------------------------------------


def _check_fp8_device(a: Args) -> None:
    cc = _device.device_info(a.device).cc
    if cc < (8, 9):
        raise NotImplementedError(
            f"{a.op}: fp8 outputs need compute capability 8.9 or newer (hardware fp8 "
            f"conversions), got cuda:{a.device} with {cc[0]}.{cc[1]}"
        )


def _aligned(meta: Meta | None, offset_bytes: int = 0) -> bool:
    return meta is None or (meta.align == 16 and offset_bytes % 16 == 0)


def _vectorized(g: Geometry, itemsize: int, aligned: bool) -> bool:
    """Mirror of ``vectorizable`` in kernels/common/ak/reduce.cuh: rows (and a group tail) of
    whole 16-byte packets, aligned pointers, row and outer strides of whole packets."""
    v = 16 // itemsize
    strides = [g.x[0], g.out[0], g.res] + ([g.x[1], g.out[1]] if g.inner > 1 else [])
    return (
        aligned
        and g.cols % v == 0
        and g.tail % v == 0
        and (g.rows <= 1 or all(s % v == 0 for s in strides))
    )


def _launches(
    a: Args, kernel: str, g: Geometry, vec: bool, flags: int, ptrs: dict[str, str | None]
) -> list[Launch]:
    """The launches of one fp8 op over ``g``: one (static, per row), or four (per tensor, on
    the one-element scale output). Rows of 0 elements still get their dynamic scales (the
    floor); so does the per-tensor scale of an empty array."""
    _check_fp8_device(a)
    x = a.need("x")
    cfg = rowwise_config(g.rows, g.cols, ITEMSIZE[x.dtype], a.sm_count, vec)
    c = _loader.constants(FAMILY)  # ak_quant_params.flags bits and .mode values
    flags |= c["e5m2"] if _fp8(a) == "fp8_e5m2" else 0
    mode = c["mode"]
    symbol = f"ak_fp8_{kernel}_{x.dtype}"
    base = {
        "out": "out", "x": "x", **ptrs, "rows": g.rows, "hidden": g.cols, "inner": g.inner,
        "tail": g.tail, "x_row_stride": g.x[0], "out_row_stride": g.out[0],
        "residual_row_stride": g.res, "x_outer_stride": g.x[1], "out_outer_stride": g.out[1],
        "eps": a.attrs.get("eps", 0.0), "flags": flags, "vecs_per_thread": cfg.vecs_per_thread,
    }  # fmt: skip
    empty = g.rows == 0 or g.cols == 0
    one = ((1, 1), (32, 1))
    if not _dynamic(a):
        if empty:
            return []
        return [
            Launch(symbol, cfg.grid, cfg.block, {**base, "scale": "scale", "mode": mode["static"]})
        ]
    if kernel == "quantize" and not (a.attr("per_token") or a.attr("group_size")):
        s = {**base, "scale": "scale"}
        steps = [Launch(symbol, *one, {**s, "mode": mode["zero"]})]
        if not empty:
            steps.append(Launch(symbol, cfg.grid, cfg.block, {**s, "mode": mode["amax"]}))
            steps.append(Launch(symbol, cfg.grid, cfg.block, {**s, "mode": mode["from_amax"]}))
        return [*steps, Launch(symbol, *one, {**s, "mode": mode["final"]})]
    if g.rows == 0:
        return []
    return [
        Launch(symbol, cfg.grid, cfg.block, {**base, "scale_out": "scale", "mode": mode["per_row"]})
    ]


def _norm_launch(kernel: str) -> Any:
    def launch(a: Args) -> list[Launch]:
        x, out = a.need("x"), a.out("out")
        hidden = x.shape[-1]
        rows, x_rs = row_layout(a.op, "x", x)
        o_rs = row_layout(a.op, "out", out)[1]
        r = a["residual"] if "residual" in a.names else None
        r_rs = row_layout(a.op, "residual", r)[1] if r is not None else 0
        w = a["weight"]
        b = a["bias"] if "bias" in a.names else None
        g = Geometry(rows, hidden, 0, hidden, (x_rs, 0), (o_rs, 0), r_rs)
        aligned = all(_aligned(m) for m in (x, out, r, w, b))
        vec = _vectorized(g, ITEMSIZE[x.dtype], aligned)
        flags = norm_flags(w is not None, b is not None, bool(a.attrs.get("gemma")))
        ptrs = {"residual": "residual" if r is not None else None,
                "weight": "weight" if w is not None else None,
                "bias": "bias" if b is not None else None}  # fmt: skip
        return _launches(a, kernel, g, vec, flags, ptrs)

    return launch


def _silu_launch(a: Args) -> list[Launch]:
    x, out = a.need("x"), a.out("out")
    d = x.shape[-1] // 2
    rows = math.prod(x.shape[:-1])
    x_rows, _, x_rs = rows_view(a.op, "x", x)
    o_rows, _, o_rs = rows_view(a.op, "out", out)
    x_rs = x_rs if x_rows == rows else 2 * d  # contiguous: split at the last dim
    o_rs = o_rs if o_rows == rows else d
    g = Geometry(rows, d, 0, d, (x_rs, 0), (o_rs, 0))
    # The kernel reads the up half at x + d of each row, through its weight slot.
    item = ITEMSIZE[x.dtype]
    vec = _vectorized(g, item, _aligned(x) and _aligned(out) and _aligned(x, d * item))
    up_in_weight_slot = norm_flags(weight=True, bias=False)
    return _launches(a, "silu_and_mul", g, vec, up_in_weight_slot, {})


def _quantize_launch(a: Args) -> list[Launch]:
    x, out = a.need("x"), a.out("out")
    k = x.shape[-1]
    rows, inner, x_l, o_l = joint_layout2(a.op, x, out)
    g = Geometry(rows, k, inner, k, x_l, o_l)
    group = a.attrs.get("group_size", 0)
    if group:
        if inner > 1:
            raise ValueError(
                f"{a.op}: with group_size, out's leading dimensions must collapse into one row "
                f"stride, got strides {tuple(out.strides)} for shape {tuple(out.shape)}"
            )
        groups = -(-k // group)
        if groups == 0:
            g = Geometry(0, 0, 0, 0, x_l, o_l)  # K == 0: no groups, no scales
        elif groups > 1:  # each group is a row: (m, j) at m * row stride + j * group_size
            g = Geometry(rows * groups, group, groups, k - (groups - 1) * group,
                         (group, x_l[0]), (group, o_l[0]))  # fmt: skip
    vec = _vectorized(g, ITEMSIZE[x.dtype], _aligned(x) and _aligned(out))
    return _launches(a, "quantize", g, vec, 0, {})


# --- declarations ----------------------------------------------------------------------------


def _fp8_ops(
    names: tuple[str, str],
    inputs: tuple[Tensor, ...],
    attrs: tuple[Attr, ...],
    rules: tuple[Callable[[Args], tuple[OutSpec, ...]], Callable[[Args], list[Launch]]],
    dynamic_attrs: tuple[Attr, ...] = (),
) -> tuple[Op, Op]:
    """(static, dynamic) declarations of one fp8 op, named ``names``: the static one takes
    ``scale`` after the required inputs (before the optional ones, as a schema needs), the
    dynamic one returns it. ``rules``: their (shapes, launch)."""
    mutated = tuple(t.name for t in inputs if t.mutated)
    required = tuple(t for t in inputs if not t.optional)
    optional = tuple(t for t in inputs if t.optional)
    shapes, launch = rules
    static = Op(
        name=names[0],
        family=FAMILY,
        inputs=(*required, Tensor("scale"), *optional),
        attrs=(*attrs, _OUT_DTYPE),
        outputs=(Output("out"),),
        shapes=shapes,
        launch=launch,
        returns=("out", *mutated),
    )
    dynamic = Op(
        name=names[1],
        family=FAMILY,
        inputs=inputs,
        attrs=(*attrs, _OUT_DTYPE, *dynamic_attrs),
        outputs=(Output("out"), Output("scale")),
        shapes=shapes,
        launch=launch,
        returns=("out", *mutated, "scale"),
    )
    return static, dynamic


def _norm_ops(kernel: str, inputs: tuple[Tensor, ...], attrs: tuple[Attr, ...]) -> tuple[Op, Op]:
    names = (f"{kernel}_fp8", f"{kernel}_fp8_dynamic")
    return _fp8_ops(names, inputs, attrs, (_norm_shapes, _norm_launch(kernel)))


NORM_OPS = {
    "rms_norm": _norm_ops("rms_norm", (Tensor("x"), Tensor("weight")), (_EPS, _GEMMA_ATTR)),
    "fused_add_rms_norm": _norm_ops(
        "fused_add_rms_norm",
        (Tensor("x"), Tensor("residual", mutated=True), Tensor("weight")),
        (_EPS, _GEMMA_ATTR),
    ),
    "layer_norm": _norm_ops(
        "layer_norm",
        (Tensor("x"), Tensor("weight", optional=True), Tensor("bias", optional=True)),
        (Attr("eps", "float", 1e-5),),
    ),
}
SILU_AND_MUL_FP8, SILU_AND_MUL_FP8_DYNAMIC = _fp8_ops(
    ("silu_and_mul_fp8", "silu_and_mul_fp8_dynamic"),
    (Tensor("x"),),
    (),
    (_silu_shapes, _silu_launch),
)
QUANTIZE_FP8_STATIC, QUANTIZE_FP8 = _fp8_ops(
    ("quantize_fp8_static", "quantize_fp8"),
    (Tensor("x"),),
    (),
    (_quantize_shapes, _quantize_launch),
    (Attr("per_token", "bool", False), Attr("group_size", "int", 0)),
)


# --- public calls ------------------------------------------------------------------------------


def norm_fp8(
    op: str,
    arrays: tuple[Any, ...],
    eps: Any,
    gemma: Any,
    fp8: str,
    scale: Any,
    out: Any,
    stream: Any,
) -> Any:
    """rms_norm / fused_add_rms_norm / layer_norm (``arrays`` as their inputs) with an fp8
    output: ``(q, scale)``, for fused_add_rms_norm ``(q, residual, scale)`` (x not written)."""
    static, dynamic = NORM_OPS[op]
    attrs: dict[str, Any] = {"eps": eps, "out_dtype": fp8}
    if op != "layer_norm":
        attrs["gemma"] = gemma
    if scale is None:
        return dynamic(*arrays, out=out, stream=stream, **attrs)
    given = dict(zip((t.name for t in dynamic.inputs), arrays, strict=True), scale=scale)
    res = static(*(given[t.name] for t in static.inputs), out=out, stream=stream, **attrs)
    return (*res, scale) if isinstance(res, tuple) else (res, scale)


def silu_and_mul_fp8(x: Any, fp8: str, scale: Any, out: Any, stream: Any) -> Any:
    """``silu(x[..., :d]) * x[..., d:]`` quantized to fp8: ``(q, scale)``."""
    if scale is None:
        return SILU_AND_MUL_FP8_DYNAMIC(x, out=out, stream=stream, out_dtype=fp8)
    return SILU_AND_MUL_FP8(x, scale, out=out, stream=stream, out_dtype=fp8), scale


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
        Result buffer of x's shape and out_dtype (static scale only).
    stream : int or stream object, optional (see ``aotkernels.ops``)

    Returns
    -------
    (q, scale): q in out_dtype; scale the given one (static) or a new float32 array.
    """
    op = "quantize_fp8"
    if isinstance(group_size, int) and not isinstance(group_size, bool) and group_size < 1:
        raise ValueError(f"{op}: group_size must be >= 1, got {group_size}")
    if scale is not None:
        if per_token is not False or group_size is not None:
            raise ValueError(
                f"{op}: give at most one of scale (static), per_token=True and group_size, got "
                f"scale, per_token={per_token!r}, group_size={group_size!r}"
            )
        return QUANTIZE_FP8_STATIC(x, scale, out=out, stream=stream, out_dtype=out_dtype), scale
    group = 0 if group_size is None else group_size  # the op's attribute: 0 is none
    res: tuple[Any, Any] = QUANTIZE_FP8(x, out=out, stream=stream, out_dtype=out_dtype,
                                        per_token=per_token, group_size=group)  # fmt: skip
    return res
