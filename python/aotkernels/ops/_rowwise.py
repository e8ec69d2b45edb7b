"""What the row-wise ops (norm, softmax) share: argument checks and the launch heuristic.

The checks run before any allocation or launch and raise with the messages RELIABILITY.md
fixes: "<op>: <arg> must be <expected>, got <actual>".

Launch configuration: one heuristic, one place.

The kernels (``kernels/common/ak/reduce.cuh``) give each row a *row group* of G threads along
``block.x``; each thread keeps N 16-byte packets of the row in registers (V = 16 / itemsize
elements per packet), so a row group holds N * G * V elements; ``block.y`` stacks R rows. The
heuristic, per row length in packets ``nvec = ceil(cols / V)``:

==================  ======  =========================================  ===========================
size class          N       G (threads per row)                        rows per block R
==================  ======  =========================================  ===========================
nvec <= 32          1       next power of two >= nvec (1 .. 32)        256 / G (a warp or less
                                                                       per row, no barrier)
32 < nvec <= 64     2       32 (warp per row)                          8
64 < nvec <= 2048   4       ceil(nvec / 4): 32, then multiples of 32   max(1, 256 // G)
                            (block per row beyond 128 packets)
2048 < nvec <= 8192 8       ceil(nvec / 8), a multiple of 32 (<= 1024)  1
nvec > 8192         0       512, multi-pass (the row streamed twice    1
                            or three times from global memory)
==================  ======  =========================================  ===========================

So bf16 rows of 1024 / 4096 / 8192 elements get a warp, 128 and 256 threads with four packets
each (several 16-byte loads in flight per thread, warp shuffles, one shared-memory step); rows up
to 64 KiB stay resident with N = 4, up to 128 KiB (65536 bf16 / 32768 f32 elements) with N = 8.

Rows that cannot take 16-byte accesses (``cols % V``, a pointer or a row stride not 16-byte
aligned) run the scalar layout, which the kernels only keep resident with N = 4: G is chosen so
that 4 * G * V >= cols, else (cols > 32768 16-bit / 16384 f32 elements) the multi-pass path.

The grid covers ``ceil(rows / R)`` blocks, capped at 32 blocks per SM (the kernels grid-stride
over rows, so the cap only trims scheduling overhead).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..arrays import ArrayInfo, dtype_name
from ._common import Call, check_disjoint, check_rows_disjoint, operand, rows_view

__all__ = [
    "RowwiseConfig",
    "check_eps",
    "check_rows2_disjoint",
    "joint_layout2",
    "row_layout",
    "row_layout2",
    "rowwise_config",
    "same_dtype",
    "vector_operand",
    "vectorizable",
]

BLOCK_THREADS = 256  # target block size for short rows (several row groups per block)
MAX_GROUP = 1024  # kMaxThreads in kernels/common/ak/reduce.cuh
STREAM_GROUP = 512  # row group of the multi-pass path
BLOCKS_PER_SM = 32


@dataclass(frozen=True)
class RowwiseConfig:
    """One launch: ``grid``/``block`` as (x, y) and the kernels' ``vecs_per_thread``."""

    grid: tuple[int, int]
    block: tuple[int, int]
    vecs_per_thread: int  # N: 1, 2, 4 or 8 packets resident per thread; 0 = multi-pass

    @property
    def threads_per_row(self) -> int:
        return self.block[0]


def _group(units: int) -> int:
    """Smallest row group covering ``units`` (one per thread): a power of two up to a warp,
    then whole warps."""
    if units <= 32:
        g = 1
        while g < units:
            g *= 2
        return g
    return -(-units // 32) * 32


def vectorizable(
    cols: int, itemsize: int, ptrs: Iterable[int], strides: Iterable[int], rows: int
) -> bool:
    """Whether the kernels take the 16-byte path (same test as ``vectorizable`` in reduce.cuh).

    ``ptrs`` are the data pointers the kernel touches (0 for absent ones), ``strides`` the row
    strides in elements (only checked when there is more than one row).
    """
    vec = 16 // itemsize
    if cols % vec or any(p % 16 for p in ptrs):
        return False
    return rows <= 1 or all(s % vec == 0 for s in strides)


@lru_cache(maxsize=4096)
def rowwise_config(
    rows: int, cols: int, itemsize: int, sm_count: int, vectorized: bool = True
) -> RowwiseConfig:
    """The launch for ``rows`` rows of ``cols`` elements (see the module docstring)."""
    v = 16 // itemsize
    nvec = -(-cols // v)
    if vectorized:
        if nvec <= 32:
            n, g = 1, _group(nvec)
        elif nvec <= 64:
            n, g = 2, 32
        elif nvec <= 2048:
            n, g = 4, _group(-(-nvec // 4))
        elif nvec <= 8 * MAX_GROUP:
            n, g = 8, _group(-(-nvec // 8))
        else:
            n, g = 0, STREAM_GROUP
    elif nvec <= 32:
        n, g = 4, _group(nvec)
    elif nvec <= 4 * MAX_GROUP:
        n, g = 4, _group(-(-nvec // 4))
    else:
        n, g = 0, STREAM_GROUP
    r = max(1, BLOCK_THREADS // g)
    blocks = min(-(-rows // r), sm_count * BLOCKS_PER_SM, 2**31 - 1)
    return RowwiseConfig((max(1, blocks), 1), (g, r), n)


# --- argument checks -----------------------------------------------------------------------------


def row_layout(op: str, arg: str, info: ArrayInfo) -> tuple[int, int]:
    """``info`` as rows of its last dimension: (rows, row stride in elements).

    The last dimension must be contiguous and the leading ones must collapse into one row
    stride (``x[:, :h]``, ``x[::2]`` are fine, a transpose is not): ``rows_view`` raises
    ``ValueError`` otherwise. A 0-d array is one row of one element.
    """
    shape = info.shape
    cols = shape[-1] if shape else 1
    rows = math.prod(shape[:-1]) if shape else 1
    v_rows, v_cols, v_stride = rows_view(op, arg, info)
    if v_rows == rows and v_cols == cols:
        return rows, v_stride
    return rows, cols  # contiguous: rows_view made one long row; split it at the last dim


def row_layout2(op: str, arg: str, info: ArrayInfo) -> tuple[int, int, int, int]:
    """``info`` as rows of its last dimension with a two-level row index:
    (rows, inner, row stride, outer stride).

    Row r starts at ``(r // inner) * outer + (r % inner) * row_stride`` when ``inner > 1``: a
    [tokens, heads, head_dim] slice of a fused QKV buffer (``qkv[:, :q_size].view(T, H, D)``)
    has independent token and head strides. Leading dimensions that collapse into one row
    stride give ``inner == 0`` (the one-level layout of ``row_layout``); more than two levels
    are a ``ValueError``.
    """
    shape, strides = info.shape, info.strides
    if not shape:
        return 1, 0, 1, 0
    cols = shape[-1]
    rows = math.prod(shape[:-1])
    if rows * cols == 0:
        return rows, 0, cols, 0  # nothing to launch
    if cols != 1 and strides[-1] != 1:
        raise ValueError(
            f"{op}: {arg} must have a contiguous last dimension (stride 1), got strides "
            f"{tuple(strides)} for shape {tuple(shape)}; pass a contiguous copy"
        )
    runs: list[tuple[int, int]] = []  # (count, stride), innermost first
    for n, st in zip(reversed(shape[:-1]), reversed(strides[:-1]), strict=True):
        if n == 1:
            continue
        if runs and st == runs[-1][0] * runs[-1][1]:
            runs[-1] = (runs[-1][0] * n, runs[-1][1])
        else:
            runs.append((n, st))
    if not runs:
        return rows, 0, cols, 0
    if len(runs) == 1:
        return rows, 0, runs[0][1], 0
    if len(runs) == 2:
        return rows, runs[0][0], runs[0][1], runs[1][1]
    raise ValueError(
        f"{op}: {arg}'s leading dimensions must collapse into at most two row strides (e.g. "
        f"tokens and heads), got strides {tuple(strides)} for shape {tuple(shape)}; pass a "
        "contiguous copy"
    )


def check_rows2_disjoint(
    op: str, arg: str, rows: int, cols: int, inner: int, stride: int, outer: int
) -> None:
    """A written two-level array's rows must not overlap each other (sufficient test: the
    level with the smaller stride steps over a row, the other over all of its rows)."""
    if inner <= 1:
        check_rows_disjoint(op, arg, rows, cols, stride)
        return
    (n0, s0), (n1, s1) = sorted(((inner, abs(stride)), (rows // inner, abs(outer))),
                                key=lambda level: level[1])  # fmt: skip
    if cols > 0 and ((n0 > 1 and s0 < cols) or (n1 > 1 and s1 < (n0 - 1) * s0 + cols)):
        raise ValueError(
            f"{op}: {arg} must not overlap itself, got row strides ({outer}, {stride}) for "
            f"[{rows // inner}, {inner}] rows of {cols} elements"
        )


def joint_layout2(
    op: str, xi: ArrayInfo, oi: ArrayInfo, allocated: bool
) -> tuple[int, int, tuple[int, int], tuple[int, int]]:
    """One two-level row split that fits x and out (same leading shape; out may have its own
    last dimension): (rows, inner, (x row stride, x outer), (out row stride, out outer)).

    An allocated out is contiguous. A one-level array takes the other's split (its outer stride
    is then inner * row stride); two different two-level splits are a ``ValueError``. A
    caller's out= must not overlap itself, nor x unless it is x exactly (in place).
    """
    rows, inner, x_rs, x_outer = row_layout2(op, "x", xi)
    o_cols = oi.shape[-1] if oi.shape else 1
    if allocated:
        return rows, inner, (x_rs, x_outer), (o_cols, inner * o_cols)
    _, o_inner, o_rs, o_outer = row_layout2(op, "out", oi)
    if inner > 1 and o_inner > 1 and o_inner != inner:
        raise ValueError(
            f"{op}: out's rows must split like x's ({rows // inner} x {inner}), got strides "
            f"{tuple(oi.strides)} for shape {tuple(oi.shape)}; pass a contiguous out"
        )
    if o_inner > 1 and inner <= 1:
        inner, x_outer = o_inner, o_inner * x_rs
    elif inner > 1 and o_inner <= 1:
        o_outer = inner * o_rs
    check_rows2_disjoint(op, "out", rows, o_cols, inner, o_rs, o_outer)
    if (oi.ptr, tuple(oi.strides), oi.dtype) != (xi.ptr, tuple(xi.strides), xi.dtype):
        check_disjoint(op, "out", oi, "x", xi)
    return rows, inner, (x_rs, x_outer), (o_rs, o_outer)


def same_dtype(op: str, arg: str, info: ArrayInfo, x: ArrayInfo) -> None:
    if info.dtype != x.dtype:
        raise TypeError(
            f"{op}: {arg}.dtype must be {dtype_name(x.dtype)} (the dtype of x), got "
            f"{dtype_name(info.dtype)}"
        )


def vector_operand(op: str, arg: str, y: Any, call: Call, hidden: int) -> ArrayInfo:
    """A per-feature parameter (weight, bias): shape (hidden,), x's dtype and device, stride 1."""
    info = operand(op, arg, y, call)
    same_dtype(op, arg, info, call.x)
    if tuple(info.shape) != (hidden,):
        raise ValueError(
            f"{op}: {arg}.shape must be ({hidden},) (the last dimension of x), got "
            f"{tuple(info.shape)}"
        )
    if hidden > 1 and info.strides[0] != 1:
        raise ValueError(
            f"{op}: {arg} must be contiguous (stride 1), got stride {info.strides[0]}; pass a "
            "contiguous copy"
        )
    return info


def check_eps(op: str, eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"{op}: eps must be a real number, got {type(eps).__name__}")
    value = float(eps)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{op}: eps must be a finite number >= 0, got {eps!r}")
    return value


def out_row_stride(
    op: str, xi: ArrayInfo, oi: ArrayInfo, rows: int, cols: int, allocated: bool
) -> int:
    """Row stride of ``out`` after the checks a caller-provided ``out=`` needs."""
    if allocated:
        return cols
    _, o_rs = row_layout(op, "out", oi)
    check_rows_disjoint(op, "out", rows, cols, o_rs)
    if (oi.ptr, tuple(oi.strides)) != (xi.ptr, tuple(xi.strides)):  # in place is fine
        check_disjoint(op, "out", oi, "x", xi)
    return o_rs
