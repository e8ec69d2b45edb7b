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

``rms_norm_backward`` / ``layer_norm_backward`` give the gradients of x, weight (and bias),
mean and rstd recomputed from x; torch autograd through ``rms_norm`` / ``layer_norm`` runs them.
dweight / dbias are column sums over the rows, bitwise repeatable (two launches: per-row-group
partial sums into a hidden workspace, then a fixed-order sum); hidden sizes up to 16384
(16-bit) / 8192 (f32).
"""

from __future__ import annotations

from typing import Any

from .. import loader as _loader
from ..arrays import ITEMSIZE
from ._backward import as_rows, norm_backward_launch, norm_workspace_shape
from ._op import (
    Args,
    Attr,
    Backward,
    BackwardCtx,
    Launch,
    Meta,
    Op,
    Output,
    OutSpec,
    Tensor,
    check_dtype,
    row_layout,
)
from ._rowwise import (
    check_eps,
    joint_layout2,
    norm_flags,
    residual_operand,
    row_layout2,
    rowwise_config,
    same_dtype,
    vector_operand,
    vectorizable,
)

__all__ = [
    "fused_add_rms_norm",
    "layer_norm",
    "layer_norm_backward",
    "rms_norm",
    "rms_norm_backward",
]

FAMILY = "norm"
_EPS = Attr("eps", "float", 1e-6)
_GEMMA_ATTR = Attr("gemma", "bool", False)


def _check_x(a: Args) -> tuple[Meta, int]:
    """The checks every op here starts with: (x, hidden)."""
    x = a.need("x")
    check_dtype(a.op, "x", x, _loader.dtypes(FAMILY))
    if not x.shape:
        raise ValueError(f"{a.op}: x must have at least 1 dimension, got a 0-d array")
    # layout checks before anything is allocated; rms_norm rows may have two levels
    if a.op == "rms_norm":
        row_layout2(a.op, "x", x)
    else:
        row_layout(a.op, "x", x)
    check_eps(a.op, a.attr("eps"))
    return x, x.shape[-1]


def _norm_shapes(a: Args) -> tuple[OutSpec, ...]:
    x, hidden = _check_x(a)
    vector_operand(a, "weight", hidden)
    if "bias" in a.names:
        vector_operand(a, "bias", hidden)
    return (OutSpec(x.shape, x.dtype),)


def _norm_launch(a: Args, kernel: str, written: str, residual: str | None) -> list[Launch]:
    """One launch of ``ak_<kernel>_<dtype>`` writing ``written`` (out, or x in place)."""
    x = a.need("x")
    hidden = x.shape[-1]
    o = a.out(written) if written == "out" else x
    inner, outer = 0, (0, 0)
    if kernel == "rms_norm":  # two-level rows: row r at (r // inner) * outer + (r % inner) * rs
        rows, inner, (x_rs, x_outer), (o_rs, o_outer) = joint_layout2(a.op, x, o)
        outer = (x_outer, o_outer)
    else:
        rows, x_rs = row_layout(a.op, "x", x)
        o_rs = row_layout(a.op, written, o)[1]
    if rows * hidden == 0:
        return []  # empty: nothing to read or write, no launch
    r = a[residual] if residual else None
    r_rs = row_layout(a.op, "residual", r)[1] if r is not None else 0
    w, b = a["weight"], a["bias"] if "bias" in a.names else None
    item = ITEMSIZE[x.dtype]
    strides = (x_rs, o_rs, r_rs) + (outer if inner > 1 else ())
    vec = vectorizable(hidden, item, (o, x, r, w, b), strides, rows)
    cfg = rowwise_config(rows, hidden, item, a.sm_count, vec)
    flags = norm_flags(w is not None, b is not None, bool(a.attrs.get("gemma")))
    args = {
        "out": written, "x": "x", "residual": residual,
        "weight": "weight" if w is not None else None, "bias": "bias" if b is not None else None,
        "rows": rows, "hidden": hidden, "inner": inner, "x_row_stride": x_rs,
        "out_row_stride": o_rs, "residual_row_stride": r_rs, "x_outer_stride": outer[0],
        "out_outer_stride": outer[1], "eps": a.attr("eps"), "flags": flags,
        "vecs_per_thread": cfg.vecs_per_thread,
    }  # fmt: skip
    return [Launch(f"ak_{kernel}_{x.dtype}", cfg.grid, cfg.block, args)]


def _rms_norm_grad(ctx: BackwardCtx, grads: tuple[Any, ...]) -> dict[str, Any]:
    """Through rms_norm_backward (grad and x viewed as rows: autograd may broadcast grad, and
    two-level x rows are copied contiguous). Gemma's (1 + weight) is an ordinary weight to the
    backward: dx takes it (rounded once to the weight dtype), and d/dweight equals
    d/d(1 + weight)."""
    s = ctx.saved
    w = s["weight"] + 1 if ctx.attr("gemma") else s["weight"]
    dx, dw = rms_norm_backward(as_rows(grads[0]), as_rows(s["x"]), w, eps=ctx.attr("eps"))
    return {"x": dx, "weight": dw}


RMS_NORM = Op(
    name="rms_norm",
    family=FAMILY,
    inputs=(Tensor("x"), Tensor("weight")),
    attrs=(_EPS, _GEMMA_ATTR),
    outputs=(Output("out", inplace_of="x"),),
    shapes=_norm_shapes,
    launch=lambda a: _norm_launch(a, "rms_norm", "out", None),
    backward=Backward(saved=("x", "weight"), fn=_rms_norm_grad),
)


def _fused_add_shapes(a: Args) -> tuple[OutSpec, ...]:
    x, hidden = _check_x(a)
    residual_operand(a, x)
    vector_operand(a, "weight", hidden)
    return ()


FUSED_ADD_RMS_NORM = Op(
    name="fused_add_rms_norm",
    family=FAMILY,
    inputs=(Tensor("x", mutated=True), Tensor("residual", mutated=True), Tensor("weight")),
    attrs=(_EPS, _GEMMA_ATTR),
    outputs=(),
    shapes=_fused_add_shapes,
    launch=lambda a: _norm_launch(a, "fused_add_rms_norm", "x", "residual"),
    returns=("x", "residual"),
)


def _layer_norm_grad(ctx: BackwardCtx, grads: tuple[Any, ...]) -> dict[str, Any]:
    """Through layer_norm_backward (grad viewed as rows: autograd may broadcast it)."""
    s = ctx.saved
    w, b = s["weight"], s["bias"]
    dx, dw, db = layer_norm_backward(as_rows(grads[0]), s["x"], w, b, eps=ctx.attr("eps"))
    return {"x": dx, "weight": dw if w is not None else None, "bias": db if b is not None else None}


LAYER_NORM = Op(
    name="layer_norm",
    family=FAMILY,
    inputs=(Tensor("x"), Tensor("weight", optional=True), Tensor("bias", optional=True)),
    attrs=(Attr("eps", "float", 1e-5),),
    outputs=(Output("out", inplace_of="x"),),
    shapes=_norm_shapes,
    launch=lambda a: _norm_launch(a, "layer_norm", "out", None),
    backward=Backward(saved=("x", "weight", "bias"), fn=_layer_norm_grad),
)


# --- backward ----------------------------------------------------------------------------------


def _backward_shapes(a: Args) -> tuple[OutSpec, ...]:
    """[out (dx), dweight, dbias (layer_norm only), ws]: dweight / dbias are (hidden,) when the
    weight / bias is given, else (0,); ws is the hidden f32 workspace of their partial sums."""
    x, hidden = _check_x(a)
    g = a.need("grad")
    same_dtype(a.op, "grad", g, x)
    if tuple(g.shape) != tuple(x.shape):
        raise ValueError(
            f"{a.op}: grad.shape must be {tuple(x.shape)} (the shape of x), got {tuple(g.shape)}"
        )
    row_layout(a.op, "grad", g)
    w = vector_operand(a, "weight", hidden)
    b = vector_operand(a, "bias", hidden) if "bias" in a.names else None
    ws = norm_workspace_shape(a.op, hidden, x.dtype, w is not None, b is not None)
    specs = [OutSpec(x.shape, x.dtype), OutSpec((hidden,) if w is not None else (0,), x.dtype)]
    if "bias" in a.names:
        specs.append(OutSpec((hidden,) if b is not None else (0,), x.dtype))
    return (*specs, OutSpec(ws, "f32"))


RMS_NORM_BACKWARD = Op(
    name="rms_norm_backward",
    family=FAMILY,
    inputs=(Tensor("grad"), Tensor("x"), Tensor("weight")),
    attrs=(_EPS,),
    outputs=(Output("out", inplace_of="grad"), Output("dweight"), Output("ws", hidden=True)),
    shapes=_backward_shapes,
    launch=lambda a: norm_backward_launch(a, "rms_norm_backward"),
    returns=("out", "dweight"),
)

LAYER_NORM_BACKWARD = Op(
    name="layer_norm_backward",
    family=FAMILY,
    inputs=(
        Tensor("grad"),
        Tensor("x"),
        Tensor("weight", optional=True),
        Tensor("bias", optional=True),
    ),
    attrs=(Attr("eps", "float", 1e-5),),
    outputs=(
        Output("out", inplace_of="grad"),
        Output("dweight"),
        Output("dbias"),
        Output("ws", hidden=True),
    ),
    shapes=_backward_shapes,
    launch=lambda a: norm_backward_launch(a, "layer_norm_backward"),
    returns=("out", "dweight", "dbias"),
)


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
        the scales are dynamic, one per row (out= is then not taken).
    out : CUDA array, optional
        Result buffer of x's shape and the output dtype; may be x itself (in place).
    stream : int or stream object, optional (see ``aotkernels.ops``)

    Returns
    -------
    The normalized array (``out`` when given), in x's framework. Accumulation is f32 and the
    result is rounded once to x's dtype. With an fp8 out_dtype: ``(q, scale)``.
    """
    if out_dtype is not None or scale is not None:
        fp8 = _quant().fp8_out_dtype("rms_norm", x, out_dtype, scale)
        if fp8 is not None:
            return _quant().norm_fp8("rms_norm", (x, weight), eps, gemma, fp8, scale, out,
                                     stream)  # fmt: skip
    return RMS_NORM(x, weight, eps=eps, gemma=gemma, out=out, stream=stream)


def _quant() -> Any:
    from . import quant  # imports this module: a late import

    return quant


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
        Overwritten with the normalized result. Must be a mutable array (JAX arrays get new
        arrays back instead, see the JAX front end).
    residual : CUDA array, same shape, dtype and device as x
        Overwritten with ``x + residual``. Must not overlap x.
    weight : CUDA array, shape (hidden,), same dtype and device as x, contiguous.
    eps : float
    gemma : bool
        Apply the weight as ``(1 + weight)`` (Gemma's RMSNorm).
    out_dtype, scale, out : optional
        ``out_dtype="float8_e4m3fn"`` / ``"float8_e5m2"``: x is left unchanged, the
        normalized sum is quantized into a new fp8 array (or ``out``, static scale only) and
        the call returns ``(q, residual, scale)``; ``scale`` as in ``rms_norm``. Otherwise
        ``out`` must be None.
    stream : int or stream object, optional (see ``aotkernels.ops``)

    Returns
    -------
    (x, residual) : the two inputs, updated.
    """
    op = "fused_add_rms_norm"
    if out_dtype is not None or scale is not None:
        fp8 = _quant().fp8_out_dtype(op, x, out_dtype, scale)
        if fp8 is not None:
            return _quant().norm_fp8(op, (x, residual, weight), eps, gemma, fp8, scale, out,
                                     stream)  # fmt: skip
    if out is not None:
        raise ValueError(f"{op}: out must be None (x is the output) without an fp8 out_dtype")
    res: tuple[Any, Any] = FUSED_ADD_RMS_NORM(x, residual, weight, eps=eps, gemma=gemma,
                                              stream=stream)  # fmt: skip
    return res


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
    stream : int or stream object, optional (see ``aotkernels.ops``)

    Returns
    -------
    The normalized array (``out`` when given), in x's framework.
    """
    if out_dtype is not None or scale is not None:
        fp8 = _quant().fp8_out_dtype("layer_norm", x, out_dtype, scale)
        if fp8 is not None:
            return _quant().norm_fp8("layer_norm", (x, weight, bias), eps, False, fp8, scale,
                                     out, stream)  # fmt: skip
    return LAYER_NORM(x, weight, bias, eps=eps, out=out, stream=stream)


def rms_norm_backward(
    grad: Any, x: Any, weight: Any, eps: float = 1e-6, *, stream: Any = None
) -> tuple[Any, Any]:
    """The gradients of ``rms_norm(x, weight, eps)``: with ``rstd = rsqrt(mean(x**2) + eps)``
    per row,

    ``dx = rstd * weight * grad - x * rstd**3 * mean(x * weight * grad)`` and
    ``dweight = sum over rows of grad * x * rstd``.

    Parameters
    ----------
    grad : CUDA array, float32 / float16 / bfloat16, shape [..., hidden]
        The gradient of rms_norm's output; x's shape and dtype.
    x : CUDA array, shape [..., hidden], hidden <= 16384 (16-bit) / 8192 (f32)
        rms_norm's input. Both may be strided by rows (last dimension contiguous).
    weight : CUDA array, shape (hidden,), x's dtype, contiguous.
    eps : float
        As given to rms_norm (rstd is recomputed from x).
    stream : int or stream object, optional (see ``aotkernels.ops``)

    Returns
    -------
    (dx, dweight) in x's dtype: f32 math, rounded once. dweight is bitwise repeatable for the
    same shapes on any GPU.
    """
    res: tuple[Any, Any] = RMS_NORM_BACKWARD(grad, x, weight, eps=eps, stream=stream)
    return res


def layer_norm_backward(
    grad: Any,
    x: Any,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
    *,
    stream: Any = None,
) -> tuple[Any, Any, Any]:
    """The gradients of ``layer_norm(x, weight, bias, eps)``: with per-row mean, ``rstd =
    rsqrt(var + eps)``, ``xhat = (x - mean) * rstd`` and ``g = weight * grad``,

    ``dx = rstd * (g - mean(g) - xhat * mean(g * xhat))``,
    ``dweight = sum over rows of grad * xhat`` and ``dbias = sum over rows of grad``.

    Parameters
    ----------
    grad, x : as for :func:`rms_norm_backward`.
    weight : CUDA array of shape (hidden,), optional (absent: 1, and dweight is empty).
    bias : CUDA array of shape (hidden,), optional: only its presence matters (absent: dbias is
        empty).
    eps : float
        As given to layer_norm.
    stream : int or stream object, optional (see ``aotkernels.ops``)

    Returns
    -------
    (dx, dweight, dbias) in x's dtype; dweight / dbias have shape (0,) where the weight / bias
    is absent. f32 math, rounded once; dweight and dbias bitwise repeatable.
    """
    res: tuple[Any, Any, Any] = LAYER_NORM_BACKWARD(grad, x, weight, bias, eps=eps, stream=stream)
    return res
