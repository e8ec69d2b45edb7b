"""What the backward ops share: pure shape checks and launch configuration.

Every function here is pure: it sees array metadata (shape, strides in elements, dtype name,
alignment of the data pointer), never a pointer or a device, and returns either output shapes or
launches. A launch is ``LaunchSpec(symbol, grid, block, args)`` where ``args`` maps the family's
parameter fields (arch_matrix.toml) to numbers, or, for pointer fields, to the *name* of the
array to bind (``"x"``, ``"grad"``, ``"out"``, ``"ws"``...) or None. Fields left out are 0.

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
f32 column sums (dweight; dbias too): N = 1 for rows of <= 32 packets, else 2 (also in the
scalar layout), G = the row group covering the row, <= 1024: hidden <= 2048 * V (16384 16-bit,
8192 f32 elements); longer rows raise ``NotImplementedError``. The grid does not depend on the
device: at most ``PARTIAL_THREADS`` threads (about what an H200 keeps resident at 64 registers:
132 SMs x 1024) and ``MAX_PARTIALS`` row groups (each writes one partial row of column sums, which
norm_reduce_cols adds up serially per column), so the workspace shape is known before any device
is asked, and dweight / dbias come out bitwise the same on every GPU for the same shapes.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Protocol

from ._elementwise import elementwise_config
from ._rowwise import MAX_GROUP, STREAM_GROUP, _group

__all__ = [
    "ArrayMeta",
    "LaunchSpec",
    "NORM_HAS_BIAS",
    "NORM_HAS_WEIGHT",
    "PARTIAL_THREADS",
    "RowSplit",
    "elementwise_backward_launch",
    "elementwise_backward_shapes",
    "gated_backward_launch",
    "gated_backward_shapes",
    "norm_backward_config",
    "norm_backward_launch",
    "norm_backward_shapes",
    "norm_workspace_shape",
    "row_split",
    "softmax_backward_config",
    "softmax_backward_launch",
    "softmax_backward_shapes",
]

ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2}
ELEMENTWISE_UNROLL = 2  # kUnrollBackward (activation.cuh), kUnroll (gated.cuh)
BLOCK_THREADS = 256  # rows per block: as many row groups as fit 256 threads
PARTIAL_THREADS = 132 * 1024
MAX_PARTIALS = 1024  # partial rows of dweight/dbias: bounds norm_reduce_cols' serial sums
REDUCE_BLOCK = (32, 32)  # norm_reduce_cols: 32 columns x 32 partial lanes
MAX_REDUCE_BLOCKS = 65535
NORM_HAS_WEIGHT, NORM_HAS_BIAS = 1, 2  # ak_norm_params.flags
NORM_MAX_N = 2  # kMaxN / kScalarN of the norm backward ops (kernels/norm/norm.cuh)


class ArrayMeta(Protocol):
    """What the functions here read of an array."""

    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def strides(self) -> tuple[int, ...]: ...  # in elements
    @property
    def dtype(self) -> str: ...  # f32, f16, bf16
    @property
    def align(self) -> int: ...  # largest power of two <= 16 dividing the data pointer


Arg = int | float | str | None


class LaunchSpec(NamedTuple):
    symbol: str
    grid: tuple[int, int]
    block: tuple[int, int]
    args: dict[str, Arg]


class RowSplit(NamedTuple):
    rows: int
    cols: int
    row_stride: int  # elements between row starts (cols for a contiguous array)


def row_split(op: str, arg: str, a: ArrayMeta) -> RowSplit:
    """``a`` as rows of its last dimension; ``ValueError`` unless the last dimension is
    contiguous and the leading ones collapse into one row stride (``x[:, :h]``, ``x[::2]``)."""
    shape, strides = tuple(a.shape), tuple(a.strides)
    if not shape:
        return RowSplit(1, 1, 1)
    cols, rows = shape[-1], math.prod(shape[:-1])
    if rows * cols == 0:
        return RowSplit(rows, cols, cols)
    if cols != 1 and strides[-1] != 1:
        raise ValueError(
            f"{op}: {arg} must have a contiguous last dimension (stride 1), got strides "
            f"{strides} for shape {shape}; pass a contiguous copy"
        )
    lead = [(n, st) for n, st in zip(shape[:-1], strides[:-1], strict=True) if n != 1]
    if not lead:
        return RowSplit(rows, cols, cols)
    step = lead[-1][1]
    for n, st in reversed(lead):
        if st != step:
            raise ValueError(
                f"{op}: {arg}'s leading dimensions must collapse into one row stride, got "
                f"strides {strides} for shape {shape}; pass a contiguous copy"
            )
        step = st * n
    return RowSplit(rows, cols, lead[-1][1])


def _vectorizable(cols: int, itemsize: int, arrays: list[ArrayMeta], strides: list[int]) -> bool:
    """The kernels' 16-byte path: whole packets per row, aligned pointers and row strides."""
    vec = 16 // itemsize
    aligned = all(a.align >= 16 for a in arrays) and all(s % vec == 0 for s in strides)
    return cols % vec == 0 and aligned


# --- shape checks (pure: they also run on fake / symbolic arrays) -------------------------------

DTYPES = ("f32", "f16", "bf16")
_LONG = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
OutShape = tuple[tuple[int, ...], str]  # (shape, dtype) of one output


def _dtype(op: str, arg: str, a: ArrayMeta, like: ArrayMeta | None = None) -> None:
    if like is None:
        if a.dtype not in DTYPES:
            names = ", ".join(_LONG[d] for d in DTYPES)
            raise TypeError(f"{op}: {arg}.dtype must be one of {names}, got {a.dtype}")
    elif a.dtype != like.dtype:
        raise TypeError(
            f"{op}: {arg}.dtype must be {_LONG.get(like.dtype, like.dtype)} (the dtype of x), "
            f"got {_LONG.get(a.dtype, a.dtype)}"
        )


def _same_shape(op: str, arg: str, a: ArrayMeta, shape: tuple[int, ...], what: str) -> None:
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{op}: {arg}.shape must be {tuple(shape)} ({what}), got {tuple(a.shape)}")


def elementwise_backward_shapes(op: str, grad: ArrayMeta, x: ArrayMeta) -> list[OutShape]:
    """relu/gelu/silu/sigmoid backward: grad and x of one shape and dtype -> dx like x."""
    _dtype(op, "x", x)
    _dtype(op, "grad", grad, x)
    _same_shape(op, "grad", grad, tuple(x.shape), "the shape of x")
    row_split(op, "x", x)
    row_split(op, "grad", grad)
    return [(tuple(x.shape), x.dtype)]


def gated_backward_shapes(op: str, grad: ArrayMeta, x: ArrayMeta) -> list[OutShape]:
    """*_and_mul backward: x [..., 2d], grad [..., d] -> dx [..., 2d]."""
    _dtype(op, "x", x)
    _dtype(op, "grad", grad, x)
    if not x.shape or x.shape[-1] % 2:
        raise ValueError(
            f"{op}: x.shape[-1] must be even (x is [..., 2d]), got shape {tuple(x.shape)}"
        )
    _same_shape(op, "grad", grad, (*x.shape[:-1], x.shape[-1] // 2), "x's, last dim halved")
    row_split(op, "x", x)
    row_split(op, "grad", grad)
    return [(tuple(x.shape), x.dtype)]


def softmax_backward_shapes(op: str, grad: ArrayMeta, y: ArrayMeta) -> list[OutShape]:
    """softmax backward over the last dim: grad and y (the forward's output) -> dx like y."""
    _dtype(op, "y", y)
    _dtype(op, "grad", grad, y)
    _same_shape(op, "grad", grad, tuple(y.shape), "the shape of y")
    row_split(op, "y", y)
    row_split(op, "grad", grad)
    return [(tuple(y.shape), y.dtype)]


def norm_backward_shapes(
    op: str, grad: ArrayMeta, x: ArrayMeta, weight: ArrayMeta | None, has_bias: bool
) -> list[OutShape]:
    """rms_norm / layer_norm backward: [dx, dweight, dbias, ws].

    dweight is (hidden,) with a weight, else (0,); dbias (hidden,) when ``has_bias``, else (0,);
    ws is the hidden f32 workspace of ``norm_workspace_shape``.
    """
    _dtype(op, "x", x)
    _dtype(op, "grad", grad, x)
    if not x.shape:
        raise ValueError(f"{op}: x must have at least 1 dimension, got a 0-d array")
    _same_shape(op, "grad", grad, tuple(x.shape), "the shape of x")
    xs = row_split(op, "x", x)
    row_split(op, "grad", grad)
    hidden = xs.cols
    if weight is not None:
        _dtype(op, "weight", weight, x)
        _same_shape(op, "weight", weight, (hidden,), "the last dimension of x")
        if hidden > 1 and weight.strides[0] != 1:
            raise ValueError(
                f"{op}: weight must be contiguous (stride 1), got stride {weight.strides[0]}; "
                "pass a contiguous copy"
            )
    ws = norm_workspace_shape(op, xs.rows, hidden, x.dtype, weight is not None, has_bias)
    return [
        (tuple(x.shape), x.dtype),
        ((hidden,) if weight is not None else (0,), x.dtype),
        ((hidden,) if has_bias else (0,), x.dtype),
        (ws, "f32"),
    ]


# --- activation / gated ------------------------------------------------------------------------


def elementwise_backward_launch(
    kernel: str, grad: ArrayMeta, x: ArrayMeta, out: ArrayMeta, sm_count: int
) -> list[LaunchSpec]:
    """``ak_<kernel>_backward_<dtype>``: out = dx from grad (dy) and x, all of one shape.

    When all three are contiguous they are one long row; otherwise each is split at its last
    dimension with its own row stride.
    """
    splits = [row_split(kernel, n, a) for n, a in (("grad", grad), ("x", x), ("out", out))]
    rows, cols = splits[0].rows, splits[0].cols
    if rows * cols == 0:
        return []
    if all(s.row_stride == cols or rows == 1 for s in splits):
        rows, cols = 1, rows * cols
        g_rs = x_rs = o_rs = cols
    else:
        g_rs, x_rs, o_rs = (s.row_stride for s in splits)
    cfg = elementwise_config(rows, cols, ITEMSIZE[x.dtype], sm_count, ELEMENTWISE_UNROLL)
    args: dict[str, Arg] = {
        "out": "out", "x": "x", "dy": "grad", "rows": rows, "cols": cols,
        "x_row_stride": x_rs, "out_row_stride": o_rs, "dy_row_stride": g_rs,
    }  # fmt: skip
    return [LaunchSpec(f"ak_{kernel}_backward_{x.dtype}", cfg.grid, cfg.block, args)]


def gated_backward_launch(
    kernel: str, grad: ArrayMeta, x: ArrayMeta, out: ArrayMeta, sm_count: int
) -> list[LaunchSpec]:
    """``ak_<kernel>_backward_<dtype>``: x [..., 2d] and grad [..., d] -> out = dx [..., 2d]."""
    xs = row_split(kernel, "x", x)
    gs = row_split(kernel, "grad", grad)
    os_ = row_split(kernel, "out", out)
    d = xs.cols // 2
    if xs.rows * d == 0:
        return []
    cfg = elementwise_config(xs.rows, d, ITEMSIZE[x.dtype], sm_count, ELEMENTWISE_UNROLL)
    args: dict[str, Arg] = {
        "out": "out", "x": "x", "dy": "grad", "rows": xs.rows, "d": d,
        "x_row_stride": xs.row_stride, "out_row_stride": os_.row_stride,
        "dy_row_stride": gs.row_stride,
    }  # fmt: skip
    return [LaunchSpec(f"ak_{kernel}_backward_{x.dtype}", cfg.grid, cfg.block, args)]


# --- softmax -------------------------------------------------------------------------------------


class RowConfig(NamedTuple):
    grid: tuple[int, int]
    block: tuple[int, int]
    vecs_per_thread: int


def softmax_backward_config(
    rows: int, cols: int, itemsize: int, sm_count: int, vectorized: bool
) -> RowConfig:
    v = 16 // itemsize
    nvec = -(-cols // v)
    if vectorized:
        if nvec <= 32:
            n, g = 1, _group(nvec)
        elif nvec <= 64:
            n, g = 2, 32
        elif nvec <= 4 * MAX_GROUP:
            n, g = 4, _group(-(-nvec // 4))
        else:
            n, g = 0, STREAM_GROUP
    elif -(-cols // (4 * v)) <= MAX_GROUP:
        n, g = 4, _group(-(-cols // (4 * v)))
    else:
        n, g = 0, STREAM_GROUP
    r = max(1, BLOCK_THREADS // g)
    blocks = min(-(-rows // r), sm_count * 32, 2**31 - 1)
    return RowConfig((max(1, blocks), 1), (g, r), n)


def softmax_backward_launch(
    grad: ArrayMeta, y: ArrayMeta, out: ArrayMeta, sm_count: int
) -> list[LaunchSpec]:
    """``ak_softmax_backward_<dtype>``: out = y * (grad - sum(grad * y)) along the last dim."""
    op = "softmax_backward"
    ys, gs, os_ = row_split(op, "y", y), row_split(op, "grad", grad), row_split(op, "out", out)
    if ys.rows * ys.cols == 0:
        return []
    item = ITEMSIZE[y.dtype]
    strides = [ys.row_stride, gs.row_stride, os_.row_stride] if ys.rows > 1 else []
    vec = _vectorizable(ys.cols, item, [y, grad, out], strides)
    cfg = softmax_backward_config(ys.rows, ys.cols, item, sm_count, vec)
    args: dict[str, Arg] = {
        "out": "out", "x": "y", "dy": "grad", "rows": ys.rows, "cols": ys.cols,
        "x_row_stride": ys.row_stride, "out_row_stride": os_.row_stride,
        "dy_row_stride": gs.row_stride, "vecs_per_thread": cfg.vecs_per_thread,
    }  # fmt: skip
    return [LaunchSpec(f"ak_softmax_backward_{y.dtype}", cfg.grid, cfg.block, args)]


# --- rms_norm / layer_norm -------------------------------------------------------------------


def norm_max_hidden(itemsize: int) -> int:
    return NORM_MAX_N * MAX_GROUP * (16 // itemsize)


def norm_backward_config(rows: int, cols: int, itemsize: int, vectorized: bool) -> RowConfig:
    """The row kernel's launch; the caller has checked ``cols <= norm_max_hidden``."""
    v = 16 // itemsize
    units = -(-cols // v) if vectorized else -(-cols // (NORM_MAX_N * v))
    if vectorized and units <= 32:
        n, g = 1, _group(units)
    else:
        n = NORM_MAX_N
        g = _group(-(-units // n) if vectorized else units)
    r = max(1, BLOCK_THREADS // g)
    blocks = min(-(-rows // r), max(1, PARTIAL_THREADS // (g * r)), max(1, MAX_PARTIALS // r))
    return RowConfig((max(1, blocks), 1), (g, r), n)


def _partials(cfg: RowConfig) -> int:
    return cfg.grid[0] * cfg.block[1]


def norm_workspace_shape(
    op: str, rows: int, hidden: int, dtype: str, has_weight: bool, has_bias: bool
) -> tuple[int, ...]:
    """The f32 workspace of dweight / dbias partials: (2 with a bias else 1, partials * hidden).

    Sized for either layout (vector or scalar, which alignment decides at launch).
    ``NotImplementedError`` for rows longer than the kernels keep in registers.
    """
    item = ITEMSIZE[dtype]
    if hidden > norm_max_hidden(item):
        raise NotImplementedError(
            f"{op}: x.shape[-1] must be <= {norm_max_hidden(item)} for {dtype} (the row and "
            f"its column sums stay in registers), got {hidden}"
        )
    if rows * hidden == 0 or not (has_weight or has_bias):
        return (0,)
    p = max(_partials(norm_backward_config(rows, hidden, item, vec)) for vec in (True, False))
    return (2 if has_bias else 1, p * hidden)


def norm_backward_launch(
    op: str,
    grad: ArrayMeta,
    x: ArrayMeta,
    weight: ArrayMeta | None,
    out: ArrayMeta,
    eps: float,
    has_bias: bool = False,
) -> list[LaunchSpec]:
    """rms_norm_backward / layer_norm_backward: the row kernel, then norm_reduce_cols.

    Arrays bound by name: grad, x, weight (None: absent), out (dx), ws (the workspace of
    ``norm_workspace_shape``), dweight (with a weight), dbias (``has_bias``).
    """
    xs, gs, os_ = row_split(op, "x", x), row_split(op, "grad", grad), row_split(op, "out", out)
    rows, hidden = xs.rows, xs.cols
    norm_workspace_shape(op, rows, hidden, x.dtype, weight is not None, has_bias)  # the cap
    if rows * hidden == 0:
        return []
    item = ITEMSIZE[x.dtype]
    arrays = [x, grad, out] + ([weight] if weight is not None else [])
    strides = [xs.row_stride, gs.row_stride, os_.row_stride] if rows > 1 else []
    cfg = norm_backward_config(rows, hidden, item, _vectorizable(hidden, item, arrays, strides))
    flags = (NORM_HAS_WEIGHT if weight is not None else 0) | (NORM_HAS_BIAS if has_bias else 0)
    sums = flags != 0
    row_args: dict[str, Arg] = {
        "out": "out", "x": "x", "dy": "grad", "weight": "weight" if weight is not None else None,
        "ws": "ws" if sums else None, "rows": rows, "hidden": hidden,
        "x_row_stride": xs.row_stride, "out_row_stride": os_.row_stride,
        "dy_row_stride": gs.row_stride, "eps": eps, "flags": flags,
        "vecs_per_thread": cfg.vecs_per_thread,
    }  # fmt: skip
    launches = [LaunchSpec(f"ak_{op}_{x.dtype}", cfg.grid, cfg.block, row_args)]
    if sums:
        grid = (min(-(-hidden // REDUCE_BLOCK[0]), MAX_REDUCE_BLOCKS), 2 if has_bias else 1)
        reduce_args: dict[str, Arg] = {
            "ws": "ws", "rows": _partials(cfg), "hidden": hidden, "flags": flags,
            "dweight": "dweight" if weight is not None else None,
            "dbias": "dbias" if has_bias else None,
        }  # fmt: skip
        launches.append(LaunchSpec(f"ak_norm_reduce_cols_{x.dtype}", grid, REDUCE_BLOCK,
                                   reduce_args))  # fmt: skip
    return launches
