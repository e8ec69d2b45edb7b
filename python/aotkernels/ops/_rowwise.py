"""What the row-wise ops (norm, softmax) share: argument checks and the launch heuristic.

The checks run before any allocation or launch and raise "<op>: <arg> must be <expected>, got
<actual>".

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
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from .. import loader as _loader
from ..arrays import dtype_name
from ._op import Args, Meta, check_vector, row_layout

__all__ = [
    "RowwiseConfig",
    "check_eps",
    "check_last_dim",
    "joint_layout2",
    "resident_layout",
    "residual_operand",
    "row_layout2",
    "rowwise_config",
    "same_dtype",
    "vector_operand",
    "vectorizable",
]

BLOCK_THREADS = 256  # target block size for short rows (several row groups per block)
STREAM_GROUP = 512  # row group of the multi-pass path
BLOCKS_PER_SM = 32


def max_group() -> int:
    """The largest row group the row engine is built for (``max_threads`` of the matrix's
    ``[constants.rowwise]``, kMaxThreads in the kernels)."""
    return int(_loader.constants("rowwise")["max_threads"])


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


def norm_flags(weight: bool, bias: bool, gemma: bool = False) -> int:
    """The .flags bits of the norm and quant kernels ([constants.norms]): a weight given, a bias
    given, Gemma's (1 + weight)."""
    bit = _loader.constants("norms")["flags"]
    return (
        (bit["has_weight"] if weight else 0)
        | (bit["has_bias"] if bias else 0)
        | (bit["gemma"] if gemma else 0)
    )


def resident_layout(nvec: int, tiers: tuple[tuple[int, int], ...]) -> tuple[int, int]:
    """(N, G) for a row of ``nvec`` packets: N from the first (most packets, N) tier that holds
    the row, G the row group covering ``ceil(nvec / N)``; beyond the last tier, the multi-pass
    path (0, STREAM_GROUP)."""
    for most, n in tiers:
        if nvec <= most:
            return n, _group(-(-nvec // n))
    return 0, STREAM_GROUP


def vectorizable(
    cols: int, itemsize: int, arrays: Iterable[Meta | None], strides: Iterable[int], rows: int
) -> bool:
    """Whether the kernels take the 16-byte path (same test as ``vectorizable`` in reduce.cuh).

    ``arrays`` are the arrays the kernel touches (None for absent ones), ``strides`` the row
    strides in elements (only checked when there is more than one row).
    """
    vec = 16 // itemsize
    if cols % vec or any(m is not None and m.align < 16 for m in arrays):
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
        n, g = resident_layout(nvec, ((32, 1), (64, 2), (2048, 4), (8 * max_group(), 8)))
    elif nvec <= 32:
        n, g = 4, _group(nvec)
    else:
        n, g = resident_layout(nvec, ((4 * max_group(), 4),))
    r = max(1, BLOCK_THREADS // g)
    blocks = min(-(-rows // r), sm_count * BLOCKS_PER_SM, 2**31 - 1)
    return RowwiseConfig((max(1, blocks), 1), (g, r), n)


# --- argument checks -----------------------------------------------------------------------------


def row_layout2(op: str, arg: str, meta: Meta) -> tuple[int, int, int, int]:
    """``meta`` as rows of its last dimension with a two-level row index:
    (rows, inner, row stride, outer stride).

    Row r starts at ``(r // inner) * outer + (r % inner) * row_stride`` when ``inner > 1``: a
    [tokens, heads, head_dim] slice of a fused QKV buffer (``qkv[:, :q_size].view(T, H, D)``)
    has independent token and head strides. Leading dimensions that collapse into one row
    stride give ``inner == 0`` (one level, as ``row_layout``); more than two levels are a
    ``ValueError``.
    """
    shape, strides = meta.shape, meta.strides
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


def joint_layout2(op: str, x: Meta, out: Meta) -> tuple[int, int, tuple[int, int], tuple[int, int]]:
    """One two-level row split that fits x and out (same leading shape; out may have its own
    last dimension): (rows, inner, (x row stride, x outer), (out row stride, out outer)).

    A one-level array takes the other's split (its outer stride is then inner * row stride);
    two different two-level splits are a ``ValueError``.
    """
    rows, inner, x_rs, x_outer = row_layout2(op, "x", x)
    _, o_inner, o_rs, o_outer = row_layout2(op, "out", out)
    if inner > 1 and o_inner > 1 and o_inner != inner:
        raise ValueError(
            f"{op}: out's rows must split like x's ({rows // inner} x {inner}), got strides "
            f"{tuple(out.strides)} for shape {tuple(out.shape)}; pass a contiguous out"
        )
    if o_inner > 1 and inner <= 1:
        inner, x_outer = o_inner, o_inner * x_rs
    elif inner > 1 and o_inner <= 1:
        o_outer = inner * o_rs
    return rows, inner, (x_rs, x_outer), (o_rs, o_outer)


def same_dtype(op: str, arg: str, meta: Meta, x: Meta) -> None:
    if meta.dtype != x.dtype:
        raise TypeError(
            f"{op}: {arg}.dtype must be {dtype_name(x.dtype)} (the dtype of x), got "
            f"{dtype_name(meta.dtype)}"
        )


def vector_operand(a: Args, arg: str, hidden: int) -> Meta | None:
    """A per-feature parameter (weight, bias): shape (hidden,), x's dtype, stride 1."""
    meta = a[arg]
    if meta is None:
        return None
    same_dtype(a.op, arg, meta, a.need("x"))
    check_vector(a.op, arg, meta, hidden, "the last dimension of x")
    return meta


def residual_operand(a: Args, x: Meta) -> Meta:
    """fused_add's residual: x's dtype and shape, rows of one stride."""
    r = a.need("residual")
    same_dtype(a.op, "residual", r, x)
    if tuple(r.shape) != tuple(x.shape):
        raise ValueError(
            f"{a.op}: residual.shape must be {tuple(x.shape)} (the shape of x), got "
            f"{tuple(r.shape)}"
        )
    row_layout(a.op, "residual", r)
    return r


def check_last_dim(a: Args, shape: tuple[int, ...], hint: str = "") -> None:
    """softmax's ``dim`` attribute: a dimension of ``shape``, and the last one (the only one
    the kernels reduce over); ``hint`` ends the ``NotImplementedError``."""
    nd = max(len(shape), 1)
    dim = a.attr("dim")
    if not -nd <= dim < nd:
        raise ValueError(f"{a.op}: dim must be in [{-nd}, {nd - 1}] for shape {shape}, got {dim}")
    if dim % nd != nd - 1:
        raise NotImplementedError(
            f"{a.op}: dim must be the last dimension (-1 or {nd - 1}), got dim={dim} for shape "
            f"{shape}{hint}"
        )


def check_eps(op: str, eps: float) -> None:
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"{op}: eps must be a finite number >= 0, got {eps!r}")
