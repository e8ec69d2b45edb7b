"""What the backward ops share: shape rules and launch configuration (see ``ops/_op.py``).

The backward ops take the gradient of the forward's output first (``grad``), then what the
forward saved (its input ``x``, or for softmax its output ``y``), and write ``out`` = the
gradient of that input (norms: also ``dweight`` / ``dbias``). The rules here are the ``shapes``
and ``launch`` of their declarations in the family modules.

Launch heuristics
-----------------
Elementwise (activation and gated backward): the forward's ``elementwise_config`` with the
backward kernels' unroll (2 vector groups in flight per thread, each of 2 or 3 loads).

softmax_backward (y and dy resident, up to 4 packets of each per thread, in 64 registers):

==================  ======  ===========================================
row length nvec     N       G (threads per row)
==================  ======  ===========================================
nvec <= 32          1       next power of two >= nvec
32 < nvec <= 64     2       32
64 < nvec <= 4096   4       ceil(nvec / 4), whole warps (<= 1024)
nvec > 4096         0       512, y and dy streamed twice
==================  ======  ===========================================

rms_norm_backward / layer_norm_backward keep, per thread, N packets of x and of dy and N * V
f32 column sums (dweight; dbias too), G = the row group covering the row, <= 1024: N = 1 for
rows of <= 32 packets, else rms_norm_backward takes N = 2 (four 16-byte loads in flight per
thread); layer_norm_backward keeps N = 1 up to 512 packets (at N = 2 its two sets of sums spill
~70 bytes in 16-bit under the 64 registers) and takes N = 2 beyond, where N = 1 would need
1024-thread row groups, one block per SM, which no other block's loads overlap at the row
reductions' barriers; the scalar layout N = 2. So hidden <= 2048 * V (16384 16-bit, 8192 f32
elements); longer rows raise ``NotImplementedError``.
The grid does not depend on the device: at most ``PARTIAL_THREADS`` threads (about what an
H200 keeps resident at 64 registers: 132 SMs x 1024) and ``MAX_PARTIALS`` row groups (each
writes one partial row of column sums, which norm_reduce_cols adds up serially per column).
The workspace is sized for the most partials any row count gives, so its shape depends on the
hidden size and dtype alone (torch's fake tensors see it without guards on the row count), and
dweight / dbias come out bitwise the same on every GPU for the same shapes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import loader as _loader
from ..arrays import ITEMSIZE
from ._elementwise import check_approximate, elementwise_config
from ._op import (
    REGISTRY,
    Args,
    Backward,
    BackwardCtx,
    Launch,
    Meta,
    OutSpec,
    check_dtype,
    row_layout,
    rows_view,
)
from ._rowwise import (
    _group,
    check_last_dim,
    max_group,
    norm_flags,
    resident_layout,
    same_dtype,
    vectorizable,
)

__all__ = [
    "as_rows",
    "MAX_PARTIALS",
    "PARTIAL_THREADS",
    "RowConfig",
    "elementwise_backward_launch",
    "elementwise_backward_shapes",
    "gated_backward_launch",
    "gated_backward_shapes",
    "grad_of_x",
    "norm_backward_config",
    "norm_backward_launch",
    "norm_max_hidden",
    "norm_workspace_shape",
    "softmax_backward_config",
    "softmax_backward_launch",
    "softmax_backward_shapes",
]

BLOCK_THREADS = 256  # rows per block: as many row groups as fit 256 threads
PARTIAL_THREADS = 132 * 1024
MAX_PARTIALS = 1024  # partial rows of dweight / dbias: bounds norm_reduce_cols' serial sums
MAX_REDUCE_BLOCKS = 65535
# Longest rows (in packets) that the vector layout runs with N = 1 (docstring).
NORM_ONE_PACKET = {"rms_norm_backward": 32, "layer_norm_backward": 512}


class RowConfig(NamedTuple):
    grid: tuple[int, int]
    block: tuple[int, int]
    vecs_per_thread: int


def as_rows(t: Any) -> Any:
    """A torch tensor the backward kernels can read: ``t`` itself when its last dimension is
    contiguous and its leading ones collapse into one row stride, else a contiguous copy
    (autograd may hand over a broadcast gradient; rms_norm's saved x may be two-level rows)."""
    try:
        rows_view("", "", Meta(tuple(t.shape), tuple(t.stride()), "", 16))
    except ValueError:
        return t.contiguous()
    return t


def grad_of_x(name: str) -> Backward:
    """x's gradient through the op ``<name>_backward(grad, x, **attrs)``, looked up when
    autograd runs it (the family module declares it after the forward op); grad is viewed as
    rows, since autograd may hand over a broadcast one."""

    def fn(ctx: BackwardCtx, grads: tuple[Any, ...]) -> dict[str, Any]:
        backward = REGISTRY[f"{name}_backward"]
        return {"x": backward(as_rows(grads[0]), ctx.saved["x"], **ctx.attrs)}

    return Backward(saved=("x",), fn=fn)


def _same_shape(op: str, arg: str, m: Meta, shape: tuple[int, ...], what: str) -> None:
    if tuple(m.shape) != tuple(shape):
        raise ValueError(f"{op}: {arg}.shape must be {tuple(shape)} ({what}), got {tuple(m.shape)}")


def _grad_and(a: Args, name: str, grad_shape: tuple[int, ...] | None = None) -> Meta:
    """The checks every backward op starts with: ``name`` (x or y) a float array, ``grad`` of
    its dtype and of ``grad_shape`` (default: its shape), both viewable as rows."""
    x, g = a.need(name), a.need("grad")
    check_dtype(a.op, name, x, _loader.dtypes(a.family_name))
    same_dtype(a.op, "grad", g, x)
    if grad_shape is None:
        _same_shape(a.op, "grad", g, tuple(x.shape), f"the shape of {name}")
    else:
        _same_shape(a.op, "grad", g, grad_shape, f"{name}'s with the last dimension halved")
    row_layout(a.op, name, x)
    row_layout(a.op, "grad", g)
    return x


# --- activation / gated ------------------------------------------------------------------------


def elementwise_backward_shapes(a: Args) -> tuple[OutSpec, ...]:
    """relu/gelu/silu/sigmoid backward: grad and x of one shape and dtype -> out like x."""
    check_approximate(a)
    x = _grad_and(a, "x")
    return (OutSpec(tuple(x.shape), x.dtype),)


def elementwise_backward_launch(a: Args, kernel: str) -> list[Launch]:
    """``ak_<kernel>_backward_<dtype>``: out = dx from grad and x. When all three are
    contiguous they are one long row; otherwise each is split at the last dimension."""
    x, g, o = a.need("x"), a.need("grad"), a.out("out")
    views = [rows_view(a.op, n, m) for n, m in (("grad", g), ("x", x), ("out", o))]
    if views[0][0] * views[0][1] == 0:
        return []
    if views[0][:2] == views[1][:2] == views[2][:2]:  # all one long row
        rows, cols = views[0][:2]
        g_rs, x_rs, o_rs = (v[2] for v in views)
    else:
        cols = x.shape[-1]
        rows = views[0][0] * views[0][1] // cols
        g_rs, x_rs, o_rs = (row_layout(a.op, n, m)[1] for n, m in (("grad", g), ("x", x),
                                                                   ("out", o)))  # fmt: skip
    c = _loader.constants(a.family_name)  # activation
    cfg = elementwise_config(
        rows, cols, ITEMSIZE[x.dtype], a.sm_count, c["unroll_backward"], c["max_threads"]
    )
    args = {"out": "out", "x": "x", "dy": "grad", "rows": rows, "cols": cols,
            "x_row_stride": x_rs, "out_row_stride": o_rs, "dy_row_stride": g_rs}  # fmt: skip
    return [Launch(f"ak_{kernel}_backward_{x.dtype}", cfg.grid, cfg.block, args)]


def gated_backward_shapes(a: Args) -> tuple[OutSpec, ...]:
    """*_and_mul backward: x [..., 2d] and grad [..., d] -> out = dx [..., 2d]."""
    check_approximate(a)
    x = a.need("x")
    if not x.shape or x.shape[-1] % 2:
        raise ValueError(
            f"{a.op}: x.shape[-1] must be even (x is [..., 2d]), got shape {tuple(x.shape)}"
        )
    _grad_and(a, "x", (*x.shape[:-1], x.shape[-1] // 2))
    return (OutSpec(tuple(x.shape), x.dtype),)


def gated_backward_launch(a: Args, kernel: str) -> list[Launch]:
    """``ak_<kernel>_backward_<dtype>``, all three split at the last dimension."""
    x = a.need("x")
    d = x.shape[-1] // 2
    rows, x_rs = row_layout(a.op, "x", x)
    if rows * d == 0:
        return []
    g_rs = row_layout(a.op, "grad", a.need("grad"))[1]
    o_rs = row_layout(a.op, "out", a.out("out"))[1]
    c = _loader.constants(a.family_name)  # gated
    cfg = elementwise_config(rows, d, ITEMSIZE[x.dtype], a.sm_count, c["unroll"], c["max_threads"])
    args = {"out": "out", "x": "x", "dy": "grad", "rows": rows, "d": d,
            "x_row_stride": x_rs, "out_row_stride": o_rs, "dy_row_stride": g_rs}  # fmt: skip
    return [Launch(f"ak_{kernel}_backward_{x.dtype}", cfg.grid, cfg.block, args)]


# --- softmax -------------------------------------------------------------------------------------


def softmax_backward_config(
    rows: int, cols: int, itemsize: int, sm_count: int, vectorized: bool
) -> RowConfig:
    nvec = -(-cols // (16 // itemsize))
    top = int(_loader.constants("softmax")["backward_max_n"])  # 4: kMaxN and kScalarN
    resident = (top * max_group(), top)
    n, g = resident_layout(nvec, ((32, 1), (64, 2), resident) if vectorized else (resident,))
    r = max(1, BLOCK_THREADS // g)
    blocks = min(-(-rows // r), sm_count * 32, 2**31 - 1)
    return RowConfig((max(1, blocks), 1), (g, r), n)


def softmax_backward_shapes(a: Args) -> tuple[OutSpec, ...]:
    """softmax backward over the last dim: grad and y (the forward's output) -> out like y."""
    y = _grad_and(a, "y")
    check_last_dim(a, tuple(y.shape))
    return (OutSpec(tuple(y.shape), y.dtype),)


def softmax_backward_launch(a: Args) -> list[Launch]:
    """``ak_softmax_backward_<dtype>``: out = y * (grad - sum(grad * y)) along the last dim."""
    y, g, o = a.need("y"), a.need("grad"), a.out("out")
    cols = y.shape[-1] if y.shape else 1
    rows, y_rs = row_layout(a.op, "y", y)
    if rows * cols == 0:
        return []
    g_rs, o_rs = row_layout(a.op, "grad", g)[1], row_layout(a.op, "out", o)[1]
    item = ITEMSIZE[y.dtype]
    vec = vectorizable(cols, item, (y, g, o), (y_rs, g_rs, o_rs), rows)
    cfg = softmax_backward_config(rows, cols, item, a.sm_count, vec)
    args = {"out": "out", "x": "y", "dy": "grad", "rows": rows, "cols": cols,
            "x_row_stride": y_rs, "out_row_stride": o_rs, "dy_row_stride": g_rs,
            "vecs_per_thread": cfg.vecs_per_thread}  # fmt: skip
    return [Launch(f"ak_softmax_backward_{y.dtype}", cfg.grid, cfg.block, args)]


# --- rms_norm / layer_norm -------------------------------------------------------------------


def _norm_max_n() -> int:
    """The most packets per thread the norm backward row kernels keep in registers."""
    return int(_loader.constants("norm")["backward_max_n"])


def norm_max_hidden(itemsize: int) -> int:
    return _norm_max_n() * max_group() * (16 // itemsize)


def norm_backward_config(
    kernel: str, rows: int, cols: int, itemsize: int, vectorized: bool
) -> RowConfig:
    """The row kernel's launch; the caller has checked ``cols <= norm_max_hidden``."""
    v = 16 // itemsize
    if vectorized:
        nvec = -(-cols // v)
        n = 1 if nvec <= NORM_ONE_PACKET[kernel] else _norm_max_n()
        g = _group(-(-nvec // n))
    else:
        n = _norm_max_n()
        g = _group(-(-cols // (n * v)))
    r = max(1, BLOCK_THREADS // g)
    blocks = min(-(-rows // r), max(1, PARTIAL_THREADS // (g * r)), max(1, MAX_PARTIALS // r))
    return RowConfig((max(1, blocks), 1), (g, r), n)


def _partials(cfg: RowConfig) -> int:
    return cfg.grid[0] * cfg.block[1]


def norm_workspace_shape(
    op: str, hidden: int, dtype: str, has_weight: bool, has_bias: bool
) -> tuple[int, ...]:  # op: rms_norm_backward or layer_norm_backward
    """The f32 workspace of dweight / dbias partials, [2 with a bias else 1, partials * hidden]
    for the most partials any row count and either layout (vector, or scalar where alignment
    says so at launch) gives. ``NotImplementedError`` for rows longer than the kernels keep in
    registers."""
    item = ITEMSIZE[dtype]
    if hidden > norm_max_hidden(item):
        raise NotImplementedError(
            f"{op}: x.shape[-1] must be <= {norm_max_hidden(item)} for {dtype} (the row and "
            f"its column sums stay in registers), got {hidden}"
        )
    if hidden == 0 or not (has_weight or has_bias):
        return (0,)
    many = MAX_PARTIALS * BLOCK_THREADS  # rows enough for every cap of the grid
    most = max(
        _partials(norm_backward_config(op, many, hidden, item, vec)) for vec in (True, False)
    )
    return (2 if has_bias else 1, most * hidden)


def norm_backward_launch(a: Args, kernel: str) -> list[Launch]:
    """rms_norm_backward / layer_norm_backward: the row kernel, then norm_reduce_cols.

    Binds grad, x, weight (when given), out (dx), ws (the hidden workspace), dweight (with a
    weight) and dbias (when the op has a bias input and it is given).
    """
    x, g, o = a.need("x"), a.need("grad"), a.out("out")
    w = a["weight"]
    has_bias = "bias" in a.names and a["bias"] is not None
    hidden = x.shape[-1]
    rows, x_rs = row_layout(a.op, "x", x)
    flags = norm_flags(w is not None, has_bias)
    if hidden == 0 or (rows == 0 and not flags):
        return []
    if rows == 0:  # dweight / dbias of no rows: 0, from a reduction over no partials
        return [_reduce_launch(x.dtype, hidden, 0, flags)]
    g_rs, o_rs = row_layout(a.op, "grad", g)[1], row_layout(a.op, "out", o)[1]
    item = ITEMSIZE[x.dtype]
    vec = vectorizable(hidden, item, (x, g, o, w), (x_rs, g_rs, o_rs), rows)
    cfg = norm_backward_config(kernel, rows, hidden, item, vec)
    args = {
        "out": "out", "x": "x", "dy": "grad", "weight": "weight" if w is not None else None,
        "ws": "ws" if flags else None, "rows": rows, "hidden": hidden, "x_row_stride": x_rs,
        "out_row_stride": o_rs, "dy_row_stride": g_rs, "eps": a.attr("eps"), "flags": flags,
        "vecs_per_thread": cfg.vecs_per_thread,
    }  # fmt: skip
    launches = [Launch(f"ak_{kernel}_{x.dtype}", cfg.grid, cfg.block, args)]
    if flags:
        launches.append(_reduce_launch(x.dtype, hidden, _partials(cfg), flags))
    return launches


def _reduce_launch(dtype: str, hidden: int, partials: int, flags: int) -> Launch:
    """norm_reduce_cols over ``partials`` rows of ws into dweight (has_weight) / dbias
    (has_bias)."""
    bit = _loader.constants("norms")["flags"]
    block = (32, int(_loader.constants("norm")["reduce_lanes"]))  # columns x partial lanes
    blocks = min(-(-hidden // block[0]), MAX_REDUCE_BLOCKS)
    grid = (blocks, 2 if flags & bit["has_bias"] else 1)
    args = {"ws": "ws" if partials else None, "rows": partials, "hidden": hidden, "flags": flags,
            "dweight": "dweight" if flags & bit["has_weight"] else None,
            "dbias": "dbias" if flags & bit["has_bias"] else None}  # fmt: skip
    return Launch(f"ak_norm_reduce_cols_{dtype}", grid, block, args)
