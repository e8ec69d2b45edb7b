"""What the row-wise elementwise ops (activation, gated) share: the launch configuration and
GELU's ``approximate`` attribute.

Heuristic, per [rows, cols] view of V-wide vectors (V = 16 bytes / item size):
  * block.x covers one row's vectors, rounded to a power of two in [32, threads] (256: the
    family's max_threads); block.y stacks rows so a block always has that many threads (short
    rows still fill the block);
  * grid.x covers the row with each thread taking ``unroll`` vectors; grid.y covers the rows
    (<= 65535, the kernels loop beyond);
  * the grid is capped at 128 blocks per SM (the kernels grid-stride beyond). Swept on an H200
    with 16384 x 8192 bf16 (tools/launch_breakdown.py): caps of 16 / 32 / 64 / 128 blocks per
    SM gave relu 3.85 / 3.94 / 4.01 / 4.03 TB/s against a 4.15 TB/s copy: a short tail beats a
    persistent grid here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from ._op import Args, Attr, Meta, rows_view

BLOCKS_PER_SM = 128
MAX_GRID_Y = 65535
# GELU's ``approximate`` attribute (torch's spelling) and the kernel name stem of each choice.
APPROXIMATE = Attr("approximate", "str", "none")
_GELU_KERNELS = {"none": "gelu", "tanh": "gelu_tanh"}


@dataclass(frozen=True)
class ElementwiseConfig:
    grid: tuple[int, int]
    block: tuple[int, int]


@lru_cache(maxsize=4096)
def elementwise_config(
    rows: int, cols: int, itemsize: int, sm_count: int, unroll: int, threads: int
) -> ElementwiseConfig:
    """``unroll`` and ``threads`` (the block size) are the family's constants."""
    vec = 16 // itemsize
    vec_cols = max(1, -(-cols // vec))
    bx = 32
    while bx < threads and bx < vec_cols:
        bx *= 2
    by = threads // bx
    gx = max(1, -(-vec_cols // (bx * unroll)))
    gy = min(MAX_GRID_Y, max(1, -(-rows // by)))
    cap = sm_count * BLOCKS_PER_SM
    if gx * gy > cap:
        gx = max(1, cap // gy)
        gy = min(gy, max(1, cap // gx))
    return ElementwiseConfig((gx, gy), (bx, by))


def joint_rows_view(op: str, x: Meta, out: Meta) -> tuple[int, int, int, int]:
    """One [rows, cols] split that fits x and out (same shape): (rows, cols, x_rs, out_rs).

    When both are contiguous they share one long row; as soon as one is only row-strided,
    both are split at the last dimension (a contiguous array's row stride is then cols).
    """
    x_split = rows_view(op, "x", x)
    o_split = rows_view(op, "out", out)
    if o_split[:2] == x_split[:2]:
        return x_split[0], x_split[1], x_split[2], o_split[2]
    cols = x.shape[-1]
    rows = math.prod(x.shape) // cols
    x_rs = x_split[2] if x_split[1] == cols else cols
    o_rs = o_split[2] if o_split[1] == cols else cols
    return rows, cols, x_rs, o_rs


def check_approximate(a: Args) -> None:
    """An op with an ``approximate`` attribute (the GELU ones) takes 'none' or 'tanh'."""
    if "approximate" in a.attrs and a.attr("approximate") not in _GELU_KERNELS:
        raise ValueError(
            f"{a.op}: approximate must be 'none' or 'tanh', got {a.attr('approximate')!r}"
        )


def gelu_kernel(a: Args) -> str:
    """The kernel name stem of a GELU op's ``approximate``: gelu or gelu_tanh."""
    return _GELU_KERNELS[a.attr("approximate")]
