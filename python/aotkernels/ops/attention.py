"""Attention forward: ``attention`` (dense), ``attention_varlen`` (packed) and ``attention_decode``
(KV cache, contiguous or paged, split-KV), f16 / bf16 with f32 accumulation.

Three kernel templates serve the three ops (arch_matrix.toml, [families.attention]): the
FlashAttention-2 design on mma.sync, built for sm_75 (f16 only) .. sm_120a and compute_80 PTX,
and on sm_90a the FlashAttention-3 design (TMA, wgmma, warp specialization) for prefill;
``attention_decode`` runs a flash-decoding kernel (the ``dec`` path, every target) whose warps
each stream their own 16-key tiles of the cache through a multi-stage cp.async ring and merge
in shared memory, then split-KV partials are merged by a second launch. Causal masks, sliding
windows, softcap, GQA packing, paging and split-KV are run-time flags; the compiled head dims
are the variants (64, 128, 256 on every path), and a head dim d (a multiple of 8 up to 256)
runs the smallest variant with d' >= d, the loads zero-filling the columns past d.

Each op is one declaration (``ops/_op.py``): ``attention`` / ``attention_lse``,
``attention_varlen`` / ``attention_varlen_lse`` (the ``_lse`` ops also return the log-sum-exp)
and ``attention_decode`` (with its split-KV workspace as hidden outputs). Their rules are pure:

* ``validate_*`` (array metadata and attributes, no device) gives a ``Problem``: every check,
  the output shapes and, for decode, the split count (``decode_splits``, device-independent so
  that the workspace shapes are known to torch's fake implementation);
* ``configure`` (a ``Problem``, the output's strides and the variants of the loaded image) gives
  a ``Config``: every scalar kernel parameter, grid, block and shared memory.

Variant choice (``_pick``): for ``attention_decode`` the dec variant, otherwise the first
variant of ``_PATH_ORDER`` present in the loaded image whose d is at least the head dim, fa3 only
for the calls it takes (``fa3_refusal``: ``attention`` / ``attention_varlen`` with head dims
64 .. 256, operands a TMA map can describe, no GQA group short enough for FA2 to pack).
Variants of one path and head dim may differ in their tiles or schedule: among those whose
``min_queries`` (arch_matrix.toml) the query length reaches (``masked_only`` ones only for calls
with a causal mask or a window, ``unmasked_only`` ones only for calls without), the one with the
largest ``min_keys`` (``min_keys_masked`` for masked calls, where given) that the key length
reaches runs (a wider key tile amortizes the
per-tile softmax work on long sequences, and wastes a partial last tile on short ones; fa3's
``defer`` schedule saves a fixed cost per query tile, which shows where a query tile has few key
tiles; fa3's 192-row query tile at d 64 wastes more rows of a short sequence, and more keys above
a causal diagonal, than the 128-row one, and a sequence that does not fill it has nothing to
gain).
``AOTKERNELS_ATTENTION_PATH`` forces a prefill path: ``fa2``, or ``fa3``, which raises for a call
fa3 cannot take, decode included (tests run every path a GPU can run).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

from .. import loader as _loader
from ..arrays import dtype_name
from ..dtypes import DTYPES
from ..errors import NoKernelImageError
from . import _op
from ._op import Args, Attr, Launch, Meta, Op, Output, OutSpec, Tensor

__all__ = [
    "Config",
    "Problem",
    "Tile",
    "attention",
    "attention_decode",
    "attention_varlen",
    "configure",
    "decode_splits",
    "fa3_maps",
    "fa3_refusal",
    "fa3_units",
    "validate_decode",
    "validate_dense",
    "validate_varlen",
]

FAMILY = "attention"
ENV = "AOTKERNELS_ATTENTION_PATH"
# Prefill paths in order of preference (fa3 exists only in sm_90a images); decode has its own.
_PATH_ORDER = ("fa3", "fa2")
_DECODE_PATH = "dec"
_FA3_BOX = 64  # head-dim columns per TMA box (128 bytes: the swizzle span)
_PACK_ROWS = 128  # FA2's prefill tiles: a GQA group with sq * group <= this is packed
_FA3_OUT_ROWS = 16  # rows of an fa3 output box: one consumer warp's
_FA3_ROWS = (128, 192)  # query rows of the fa3 tiles: two or three consumer warpgroups of 64
_MAX_SEQ = 2**31 - 1  # sequence positions are 32-bit in the kernel
_UNBOUNDED = 2**62  # a window side without a limit
_MAX_GRID_YZ = 65535
_MAX_GRID_X = 2**31 - 1
_MAX_DECODE_Q = 16
_DECODE_ROWS = 16  # query rows of every decode CTA: the split rule counts on it
# Split-KV aims at this many decode CTAs: four fit an H100 / H200 SM (their shared memory, each
# under 64 KiB, is what bounds them), so about one wave there; fewer GPUs' SMs take it in waves.
_SPLIT_CTAS = 512
_SPLIT_KEYS = 64  # and gives each split at least this many keys (4 tiles)
_LOG2E = 1.4426950408889634


class Tile(NamedTuple):
    """One variant of the loaded image (arch_matrix.toml): compiled head dim and tile shape."""

    name: str
    path: str
    decode: int  # 1: a tile of attention_decode (the dec path, 16 rows), 0: of the prefill ops
    d: int
    bm: int
    bn: int
    threads: int
    smem: int
    min_keys: int = 0  # serves key lengths from this one up (fa3: a longer key tile, a schedule)
    min_keys_masked: int | None = None  # for calls with a causal mask or a window (None: min_keys)
    min_queries: int = 0  # serves query lengths from this one up
    o_tma: int = 0  # fa3: the epilogue can store O through the TMA (tmap_o)
    masked_only: int = 0  # 1: serves only calls with a causal mask or a window
    unmasked_only: int = 0  # 1: serves only calls without one


class Problem(NamedTuple):
    """A validated call, independent of the device and of the output's layout."""

    op: str
    dtype: str
    batch: int
    sq: int  # the query length (varlen: max_seqlen_q)
    sk: int  # the key length (varlen: max_seqlen_k; decode: the cache capacity)
    heads: int
    kv_heads: int
    d: int
    q: tuple[int, int, int]  # strides (batch, seq, head) in elements; varlen: batch 0
    k: tuple[int, int, int]  # paged: (page, slot, head)
    v: tuple[int, int, int]
    window: tuple[int, int]
    scale_log2: float
    softcap_pre: float
    flags: int  # everything but pack / split, which depend on the tile
    out_shape: tuple[int, ...]
    lse_shape: tuple[int, ...]
    lse: tuple[int, int]  # (batch, head) strides of the LSE
    page_size: int = 0
    bt_sb: int = 0
    splits: int = 1  # decode: split-KV factor (the workspace holds this many partials)
    rows: tuple[int, int] = (0, 0)  # rows of q and k along their sequence dim (varlen: totals)


class Config(NamedTuple):
    tile: Tile
    fields: dict[str, int | float]  # every non-pointer kernel parameter, by name
    grid: tuple[int, int, int]
    block: int
    smem: int
    splits: int  # > 1: attn_combine merges the f32 partials
    combine_grid: int
    combine_block: int


def _flag(name: str) -> int:
    """A bit of ak_attention_params.flags ([families.attention.constants] of the matrix)."""
    return int(_loader.constants(FAMILY)["flags"][name])


# --- argument checks -------------------------------------------------------------------------


def _check_qkv_dtypes(op: str, q: Meta, k: Meta, v: Meta, kn: str, vn: str) -> None:
    allowed = _loader.dtypes(FAMILY)
    if q.dtype not in allowed:
        names = ", ".join(dtype_name(d) for d in allowed)
        raise TypeError(f"{op}: q.dtype must be one of {names}, got {dtype_name(q.dtype)}")
    for name, m in ((kn, k), (vn, v)):
        if m.dtype != q.dtype:
            raise TypeError(
                f"{op}: {name}.dtype must equal q.dtype ({dtype_name(q.dtype)}), got "
                f"{dtype_name(m.dtype)}"
            )


def _check_head_dim(op: str, d: int) -> None:
    if d <= 0:
        raise ValueError(f"{op}: the head dim (q.shape[-1]) must be positive, got {d}")
    if d % 8 or d > 256:
        raise NotImplementedError(
            f"{op}: head dims must be a multiple of 8 up to 256 (64, 128 and 256 are compiled; "
            f"others run the next one, zero-padded), got {d}; pad the head dim with zeros"
        )


def _check_layout(op: str, name: str, m: Meta) -> None:
    """Last dim contiguous; the other strides and the pointer on 16-byte boundaries."""
    if m.shape[-1] > 1 and m.strides[-1] != 1:
        raise ValueError(
            f"{op}: {name} must have a contiguous last dimension (stride 1), got strides "
            f"{m.strides} for shape {m.shape}; pass a contiguous copy"
        )
    if any(s < 0 for s in m.strides):
        raise ValueError(f"{op}: {name} strides must be non-negative, got {m.strides}")
    if m.align < 16 or any(
        s % 8 for n, s in zip(m.shape[:-1], m.strides[:-1], strict=True) if n > 1
    ):
        raise ValueError(
            f"{op}: {name} must be 16-byte aligned with strides that are multiples of 8 "
            f"elements (16 bytes), got strides {m.strides} and a pointer aligned to {m.align} "
            "bytes; pass a contiguous copy"
        )


def _window(op: str, causal: bool, window: tuple[int, ...] | None) -> tuple[int, int]:
    """(left, right) bounds for the kernel; causal caps right at 0 (bottom-right aligned)."""
    left = right = -1
    if window is not None:
        if len(window) != 2:
            raise ValueError(f"{op}: window must be a (left, right) pair, got {window}")
        left, right = window
        if left < -1 or right < -1:
            raise ValueError(f"{op}: window sides must be >= 0, or -1 for unbounded, got {window}")
    if causal:
        right = 0 if right < 0 else min(right, 0)
    return (_UNBOUNDED if left < 0 else left), (_UNBOUNDED if right < 0 else right)


def _finite(op: str, name: str, x: float) -> float:
    if not math.isfinite(x):
        raise ValueError(f"{op}: {name} must be finite, got {x}")
    return x


def _scales(
    op: str, scale: float | None, softcap: float | None, d: int
) -> tuple[float, float, int]:
    """(scale_log2, softcap_pre, flag): the kernel's logits are s = qk * scale_log2, or with a
    softcap s = tanh(qk * scale / cap) * cap * log2(e) (Gemma-2), both in the log2 domain."""
    sc = 1.0 / math.sqrt(d) if scale is None else _finite(op, "scale", scale)
    cap = 0.0 if softcap is None else _finite(op, "softcap", softcap)
    if cap < 0:
        raise ValueError(f"{op}: softcap must be positive (or 0 / None for none), got {cap}")
    if cap == 0:
        return sc * _LOG2E, 0.0, 0
    return cap * _LOG2E, sc / cap, _flag("softcap")


def _qkv_shapes(op: str, q: Meta, k: Meta, v: Meta, kn: str, vn: str, nd: int) -> None:
    for name, m in (("q", q), (kn, k), (vn, v)):
        if len(m.shape) != nd:
            want = "[B, S, H, D]" if nd == 4 else "[total, H, D]"
            raise ValueError(f"{op}: {name} must be {nd}-D {want}, got shape {m.shape}")
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"{op}: {vn}.shape must equal {kn}.shape {k.shape}, got {v.shape}")
    h, hkv = q.shape[-2], k.shape[-2]
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"{op}: {kn}.shape[-1] must equal q's head dim {q.shape[-1]}, got {k.shape[-1]}"
        )
    if hkv == 0 or h % hkv:
        raise ValueError(
            f"{op}: the query heads ({h}) must be a multiple of the KV heads ({hkv}) (GQA/MQA)"
        )


def _strides3(m: Meta) -> tuple[int, int, int]:
    if len(m.strides) == 4:
        return m.strides[0], m.strides[1], m.strides[2]
    return 0, m.strides[0], m.strides[1]


def _seqlens_meta(op: str, name: str, m: Meta, n: int | None) -> int:
    if m.dtype != "int32":
        raise TypeError(f"{op}: {name}.dtype must be int32, got {dtype_name(m.dtype)}")
    if len(m.shape) != 1 or (n is not None and m.shape[0] != n):
        want = f"({n},)" if n is not None else "1-D [batch + 1]"
        raise ValueError(f"{op}: {name}.shape must be {want}, got {m.shape}")
    if m.shape[0] > 1 and m.strides[0] != 1:
        raise ValueError(f"{op}: {name} must be contiguous, got stride {m.strides[0]}")
    return m.shape[0]


# --- validation (pure: metadata and attributes) ----------------------------------------------


def validate_dense(
    q: Meta,
    k: Meta,
    v: Meta,
    causal: bool,
    scale: float | None,
    window: tuple[int, ...] | None,
    softcap: float | None,
    return_lse: bool,
) -> Problem:
    """``attention``: q [B, Sq, H, D], k / v [B, Sk, Hkv, D]."""
    op = "attention"
    _check_qkv_dtypes(op, q, k, v, "k", "v")
    _qkv_shapes(op, q, k, v, "k", "v", 4)
    b, sq, h, d = q.shape
    bk, sk, hkv, _ = k.shape
    if bk != b:
        raise ValueError(f"{op}: k.shape[0] must equal q's batch {b}, got {bk}")
    _check_head_dim(op, d)
    if max(sq, sk) > _MAX_SEQ:
        raise ValueError(f"{op}: sequence lengths must be below 2**31, got {max(sq, sk)}")
    for name, m in (("q", q), ("k", k), ("v", v)):
        _check_layout(op, name, m)
    win = _window(op, causal, window)
    scale_log2, pre, flags = _scales(op, scale, softcap, d)
    flags |= _flag("write_lse") if return_lse else 0
    return Problem(
        op, q.dtype, b, sq, sk, h, hkv, d, _strides3(q), _strides3(k), _strides3(v), win,
        scale_log2, pre, flags, tuple(q.shape), (b, h, sq), (h * sq, sq), rows=(sq, sk),
    )  # fmt: skip


def validate_varlen(
    q: Meta,
    k: Meta,
    v: Meta,
    cu_q: Meta,
    cu_k: Meta,
    max_seqlen_q: int,
    max_seqlen_k: int,
    causal: bool,
    scale: float | None,
    window: tuple[int, ...] | None,
    softcap: float | None,
    return_lse: bool,
) -> Problem:
    """``attention_varlen``: q [total_q, H, D], k / v [total_k, Hkv, D], cu_seqlens [B + 1].

    The offsets live on the device: the kernel trusts them to be non-decreasing, to start at 0
    and stay within total_q / total_k, and every length to be at most its max_seqlen.
    """
    op = "attention_varlen"
    _check_qkv_dtypes(op, q, k, v, "k", "v")
    _qkv_shapes(op, q, k, v, "k", "v", 3)
    total_q, h, d = q.shape
    hkv = k.shape[1]
    _check_head_dim(op, d)
    nb = _seqlens_meta(op, "cu_seqlens_q", cu_q, None)
    if nb < 1:
        raise ValueError(f"{op}: cu_seqlens_q.shape must be (batch + 1,), got {cu_q.shape}")
    _seqlens_meta(op, "cu_seqlens_k", cu_k, nb)
    for name, n in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if not 0 <= n <= _MAX_SEQ:
            raise ValueError(f"{op}: {name} must be in [0, 2**31 - 1], got {n}")
    if max(total_q, k.shape[0]) > _MAX_SEQ:
        raise ValueError(
            f"{op}: packed lengths must be below 2**31, got {max(total_q, k.shape[0])}"
        )
    for name, m in (("q", q), ("k", k), ("v", v)):
        _check_layout(op, name, m)
    win = _window(op, causal, window)
    scale_log2, pre, flags = _scales(op, scale, softcap, d)
    flags |= _flag("varlen") | (_flag("write_lse") if return_lse else 0)
    return Problem(
        op, q.dtype, nb - 1, max_seqlen_q, max_seqlen_k, h, hkv, d, _strides3(q), _strides3(k),
        _strides3(v), win, scale_log2, pre, flags, tuple(q.shape), (h, total_q), (0, total_q),
        rows=(total_q, k.shape[0]),
    )  # fmt: skip


def decode_splits(batch: int, kv_heads: int, rows_per_kv: int, capacity: int) -> int:
    """Split-KV factor of a decode launch: about ``_SPLIT_CTAS`` CTAs (what keeps enough K / V
    tiles in flight to stream the cache), each split keeping ``_SPLIT_KEYS`` keys or more so
    that its partial is worth the combine. No device input: the workspace shape follows."""
    ctas = math.ceil(rows_per_kv / _DECODE_ROWS) * kv_heads * batch
    if ctas == 0 or ctas >= _SPLIT_CTAS:
        return 1
    most = int(_loader.constants(FAMILY)["max_splits"])
    return max(1, min(_SPLIT_CTAS // ctas, capacity // _SPLIT_KEYS, most))


def validate_decode(
    q: Meta,
    k: Meta,
    v: Meta,
    seqlens: Meta,
    block_table: Meta | None,
    causal: bool,
    scale: float | None,
    softcap: float | None,
) -> Problem:
    """``attention_decode``: q [B, Sq <= 16, H, D]; cache [B, Smax, Hkv, D], or pages
    [num_blocks, page_size >= 16, Hkv, D] with block_table [B, max_blocks] (int32)."""
    op = "attention_decode"
    _check_qkv_dtypes(op, q, k, v, "k_cache", "v_cache")
    _qkv_shapes(op, q, k, v, "k_cache", "v_cache", 4)
    b, sq, h, d = q.shape
    _, page, hkv, _ = k.shape
    _check_head_dim(op, d)
    if sq > _MAX_DECODE_Q:
        raise ValueError(
            f"{op}: q.shape[1] (new tokens per sequence) must be at most {_MAX_DECODE_Q}, got "
            f"{sq}; use attention / attention_varlen for prefill"
        )
    _seqlens_meta(op, "cache_seqlens", seqlens, b)
    flags = _flag("seqused")
    bt_sb = 0
    if block_table is None:
        if k.shape[0] != b:
            raise ValueError(f"{op}: k_cache.shape[0] must equal q's batch {b}, got {k.shape[0]}")
        capacity, page = page, 0
    else:
        if block_table.dtype != "int32":
            raise TypeError(
                f"{op}: block_table.dtype must be int32, got {dtype_name(block_table.dtype)}"
            )
        if len(block_table.shape) != 2 or block_table.shape[0] != b:
            raise ValueError(
                f"{op}: block_table.shape must be ({b}, max_blocks), got {block_table.shape}"
            )
        if block_table.shape[1] > 1 and block_table.strides[1] != 1:
            raise ValueError(
                f"{op}: block_table must have a contiguous last dimension, got strides "
                f"{block_table.strides}"
            )
        min_page = int(_loader.constants(FAMILY)["min_page"])
        if page < min_page:
            raise ValueError(
                f"{op}: the page size (k_cache.shape[1]) must be >= {min_page}, got {page}"
            )
        capacity = page * block_table.shape[1]
        bt_sb = block_table.strides[0]
        flags |= _flag("paged")
    if capacity > _MAX_SEQ:
        raise ValueError(f"{op}: the cache holds at most 2**31 - 1 positions, got {capacity}")
    for name, m in (("q", q), ("k_cache", k), ("v_cache", v)):
        _check_layout(op, name, m)
    win = _window(op, causal, None)
    scale_log2, pre, cap_flag = _scales(op, scale, softcap, d)
    splits = decode_splits(b, hkv, sq * (h // hkv), capacity)
    return Problem(
        op, q.dtype, b, sq, capacity, h, hkv, d, _strides3(q), _strides3(k), _strides3(v), win,
        scale_log2, pre, flags | cap_flag, tuple(q.shape), (b, h, sq), (h * sq, sq), page, bt_sb,
        splits,
    )  # fmt: skip


# --- configuration (pure: a Problem, the output layout, the loaded variants) ------------------


def _fa3_map(
    p: Problem, name: str, ptr: str, st: tuple[int, int, int], heads: int, rows: int, box: int
) -> _op.TensorMap:
    """One fa3 TMA map, (d, heads, rows, batch) with the operand's (batch, seq, head) element
    strides ``st`` (varlen: a unit batch over the packed rows), boxes of ``box`` rows. A
    dimension of extent 1 never steps, so its stride is replaced by the span below it (the
    driver wants multiples of 16)."""
    dims = (p.d, heads, rows, 1 if p.flags & _flag("varlen") else p.batch)
    strides: list[int] = []
    span = p.d * 2
    for n, s in zip(dims[1:], (st[2], st[1], st[0]), strict=True):
        step = s * 2 if n > 1 else span
        strides.append(step)
        span = step * n
    tma = DTYPES[p.dtype].tma
    return _op.TensorMap(f"tmap_{name}", ptr, tma, dims, tuple(strides), (_FA3_BOX, 1, box, 1))


def fa3_maps(p: Problem, bm: int, bn: int) -> tuple[_op.TensorMap, ...]:
    """The fa3 kernel's TMA maps of q, k and v (the output's: ``_fa3_out_map``)."""
    return (
        _fa3_map(p, "q", "q", p.q, p.heads, p.rows[0], bm),
        _fa3_map(p, "k", "k", p.k, p.kv_heads, p.rows[1], bn),
        _fa3_map(p, "v", "v", p.v, p.kv_heads, p.rows[1], bn),
    )


def _fa3_out_map(p: Problem, out: tuple[int, int, int]) -> _op.TensorMap | None:
    """The output's TMA map, given its (batch, seq, head) element strides: the epilogue stores
    boxes of one consumer warp's 16 rows. None where the driver would refuse it (a stride of
    2**40 bytes or more): the kernel then copies its staged rows out in 16-byte pieces (flag
    tma_out off)."""
    m = _fa3_map(p, "o", "out", out, p.heads, p.rows[0], _FA3_OUT_ROWS)
    return m if _op.tensor_map_problem(m) is None else None


def fa3_refusal(p: Problem) -> str | None:
    """Why the fa3 path does not take ``p`` (None: it does)."""
    if p.op == "attention_decode":
        return "decode (paged KV, split-KV) runs on the dec path"
    if p.d < 64:
        return f"head dim {p.d} is below the fa3 variants' 64"
    if min(p.rows) == 0:
        return "an empty q or k has no TMA map"
    if fa3_units(p, min(_FA3_ROWS)) > _MAX_GRID_X:
        return "more query tiles than its 32-bit schedule counts"
    group = p.heads // p.kv_heads
    if group > 1 and p.sq * group <= _PACK_ROWS:
        return f"GQA with {p.sq} query rows: FA2 packs the group's heads into one tile"
    varlen = bool(p.flags & _flag("varlen"))
    for name, st, heads, rows in (
        ("q", p.q, p.heads, p.rows[0]), ("k", p.k, p.kv_heads, p.rows[1]),
        ("v", p.v, p.kv_heads, p.rows[1]),
    ):  # fmt: skip
        extents = (1 if varlen else p.batch, rows, heads)
        if any(n > 1 and s == 0 for n, s in zip(extents, st, strict=True)):
            return f"{name} broadcasts a dimension (stride 0), which a TMA map cannot"
    for m in fa3_maps(p, max(_FA3_ROWS), max(_FA3_ROWS)):
        bad = _op.tensor_map_problem(m)
        if bad is not None:
            return f"the TMA map of {m.ptr_field} would be refused ({bad})"
    return None


def _tiles(fam: Any, dtype: str) -> list[Tile]:
    """The variants of the loaded image that hold a ``dtype`` forward kernel: the prefill ones
    in path order (the forced path alone, if any), then the decode ones."""
    forced = os.environ.get(ENV, "")
    if forced and forced not in _PATH_ORDER:
        raise ValueError(f"{ENV} must be one of {', '.join(_PATH_ORDER)}, got {forced!r}")
    order = (*_PATH_ORDER, _DECODE_PATH)
    out = []
    for name, v in fam.variants.items():
        if f"ak_attn_fwd_{dtype}_{name}" not in fam.kernels:
            continue
        if forced and v["path"] not in (forced, _DECODE_PATH):
            continue
        ints = [int(v[key]) for key in ("decode", "d", "bm", "bn", "threads", "smem")]
        masked = v.get("min_keys_masked")
        out.append(
            Tile(name, str(v["path"]), *ints)._replace(
                min_keys=int(v.get("min_keys", 0)),
                min_keys_masked=None if masked is None else int(masked),
                min_queries=int(v.get("min_queries", 0)),
                o_tma=int(v.get("o_tma", 0)),
                masked_only=int(v.get("masked_only", 0)),
                unmasked_only=int(v.get("unmasked_only", 0)),
            )
        )
    out.sort(key=lambda t: (order.index(t.path), t.d))
    return out


def _pick(p: Problem, tiles: Sequence[Tile], where: str) -> Tile:
    """The first tile (path order, then d) with d' >= the head dim; among those of its path and
    d whose ``min_queries`` the query length reaches (not ``masked_only`` ones for a call without
    a mask, nor ``unmasked_only`` ones for a call with one), the one with the largest
    ``min_keys`` (``min_keys_masked`` for a causal or windowed call) that the key length
    reaches."""
    op, d, dtype = p.op, p.d, p.dtype
    decode = int(op == "attention_decode")
    masked = p.window != (_UNBOUNDED, _UNBOUNDED)

    def least(u: Tile) -> int:
        return u.min_keys if not masked or u.min_keys_masked is None else u.min_keys_masked

    for t in tiles:
        if t.d >= d and t.decode == decode:
            same = [u for u in tiles if (u.path, u.d, u.decode) == (t.path, t.d, decode)]
            fits = [
                u
                for u in same
                if least(u) <= p.sk
                and u.min_queries <= p.sq
                and not (u.masked_only if not masked else u.unmasked_only)
            ]
            return max(fits, key=least) if fits else t
    raise NoKernelImageError(
        f"{op}: no {dtype_name(dtype)} attention kernel for head dim {d} on {where}; "
        f"{dtype_name(dtype)} needs tensor cores this GPU lacks (bf16: sm_80+)"
    )


def fa3_units(p: Problem, bm: int) -> int:
    """Work units of the fa3 kernel's persistent schedule (the kernel's for_each_tile): pairs of
    query tiles per head and sequence; with 192-row tiles and an odd tile count, the middle
    tiles of two (head, sequence) rows make one unit instead of one each."""
    tiles, rows = math.ceil(p.sq / bm), p.heads * p.batch
    if bm == 192:
        return tiles // 2 * rows + tiles % 2 * math.ceil(rows / 2)
    return (tiles + 1) // 2 * rows


def configure(
    p: Problem,
    out: tuple[int, ...],
    tiles: Sequence[Tile],
    where: str = "this device",
    sms: int | None = None,
) -> Config:
    """The launch of a validated problem: ``out`` the output's strides (in elements); ``sms``
    the device's SM count (fa3's persistent grid for dense calls: at most one CTA per SM; None,
    and every varlen call: one per work unit)."""
    if fa3_refusal(p) is not None:
        tiles = [t for t in tiles if t.path != "fa3"]
    tile = _pick(p, tiles, where)
    group = p.heads // p.kv_heads
    decode = p.op == "attention_decode"
    if decode and tile.bm != _DECODE_ROWS:
        raise AssertionError(f"{tile.name}: decode tiles must have {_DECODE_ROWS} rows")
    if tile.path == "fa3" and tile.bm not in _FA3_ROWS:
        raise AssertionError(f"{tile.name}: fa3 tiles must have 64 x 2 or 64 x 3 rows")
    # GQA packing: a group's query heads share the tile when the queries are too few to fill it
    # (always for decode): K/V are then read once per KV head.
    pack = tile.path != "fa3" and group > 1 and (decode or p.sq * group <= tile.bm)
    rows = p.sq * group if pack else p.sq
    slots = p.kv_heads if pack else p.heads
    m_blocks = max(1, math.ceil(rows / tile.bm))
    if slots > _MAX_GRID_YZ:
        raise ValueError(f"{p.op}: at most {_MAX_GRID_YZ} heads per launch, got {slots}")
    if p.batch * p.splits > _MAX_GRID_YZ:
        raise ValueError(f"{p.op}: at most {_MAX_GRID_YZ} sequences per launch, got {p.batch}")
    flags = p.flags | (_flag("pack_gqa") if pack else 0) | (_flag("split") if p.splits > 1 else 0)
    o = (0, out[0], out[1]) if len(out) == 3 else out[:3]
    acc_rows = p.batch * p.heads * p.sq
    fields: dict[str, int | float] = {
        "q_sb": p.q[0], "q_ss": p.q[1], "q_sh": p.q[2],
        "k_sb": p.k[0], "k_ss": p.k[1], "k_sh": p.k[2],
        "v_sb": p.v[0], "v_ss": p.v[1], "v_sh": p.v[2],
        "o_sb": o[0], "o_ss": o[1], "o_sh": o[2],
        "lse_sb": p.lse[0], "lse_sh": p.lse[1], "acc_split": acc_rows, "bt_sb": p.bt_sb,
        "window_left": p.window[0], "window_right": p.window[1],
        "batch": p.batch, "heads": p.heads, "kv_heads": p.kv_heads, "d": p.d,
        "seqlen_q": p.sq, "seqlen_k": p.sk, "page_size": p.page_size, "num_splits": p.splits,
        "flags": flags, "scale_log2": p.scale_log2, "softcap_pre": p.softcap_pre,
    }  # fmt: skip
    grid = (m_blocks, slots, p.batch * p.splits)
    if tile.path == "fa3":
        # Dense: persistent, at most one CTA per SM walking the units round-robin (their sizes
        # are equal, or pair up under causal masks). Varlen: the units of a mixed batch differ
        # in size and a static deal balances them badly, so one CTA per unit and the hardware
        # hands the next unit to whichever SM frees first.
        units = fa3_units(p, tile.bm)
        if tile.o_tma and _fa3_out_map(p, (o[0], o[1], o[2])) is not None:
            fields["flags"] = flags | _flag("tma_out")
        varlen = bool(p.flags & _flag("varlen"))
        grid = (units if varlen else min(units, sms or _MAX_GRID_X), 1, 1)
    # attn_combine: one CTA of combine_warps warps per output row.
    combine_block = 32 * int(_loader.constants(FAMILY)["combine_warps"])
    return Config(
        tile, fields, grid, tile.threads, tile.smem, p.splits, acc_rows, combine_block,
    )  # fmt: skip


# --- the declarations --------------------------------------------------------------------------

_COMMON = (
    Attr("causal", "bool", False),
    Attr("scale", "float?", None),
    Attr("window", "int[]?", None),
    Attr("softcap", "float?", None),
)


def _problem(a: Args) -> Problem:
    """The op's Problem from its declared arguments."""
    lse = a.op.endswith("_lse")
    if a.op.startswith("attention_decode"):
        bt = a["block_table"]
        return validate_decode(
            a.need("q"), a.need("k_cache"), a.need("v_cache"), a.need("cache_seqlens"), bt,
            a.attr("causal"), a.attr("scale"), a.attr("softcap"),
        )  # fmt: skip
    if a.op.startswith("attention_varlen"):
        return validate_varlen(
            a.need("q"), a.need("k"), a.need("v"), a.need("cu_seqlens_q"),
            a.need("cu_seqlens_k"), a.attr("max_seqlen_q"), a.attr("max_seqlen_k"),
            a.attr("causal"), a.attr("scale"), a.attr("window"), a.attr("softcap"), lse,
        )  # fmt: skip
    return validate_dense(
        a.need("q"), a.need("k"), a.need("v"), a.attr("causal"), a.attr("scale"),
        a.attr("window"), a.attr("softcap"), lse,
    )  # fmt: skip


def _shapes(a: Args) -> tuple[OutSpec, ...]:
    p = _problem(a)
    specs = [OutSpec(p.out_shape, p.dtype)]
    if a.op.endswith("_lse"):
        specs.append(OutSpec(p.lse_shape, "f32"))
    if p.op == "attention_decode":  # the split-KV workspace (empty without splits)
        parts = p.splits if p.splits > 1 else 0
        rows = p.batch * p.heads * p.sq
        specs += [OutSpec((parts, rows, p.d), "f32"), OutSpec((parts, rows), "f32")]
    return tuple(specs)


def _launch(a: Args) -> list[Launch]:
    p = _problem(a)
    out = a.out("out")
    _check_layout(p.op, "out", out)
    if math.prod(p.out_shape) == 0 or p.batch == 0:
        return []
    fam = a.family()
    dev = fam.device
    where = f"device {dev.index} ({dev.name}, cc {dev.cc_str}) running image {fam.choice.target}"
    tiles = _tiles(fam, p.dtype)
    if os.environ.get(ENV) == "fa3":
        why = fa3_refusal(p) if any(t.path == "fa3" for t in tiles) else f"{where} has no fa3"
        if why is not None:
            raise NotImplementedError(f"{p.op}: {ENV}=fa3, but {why}")
    cfg = configure(p, out.strides, tiles, where, dev.sm_count)
    decode = p.op == "attention_decode"
    ptrs: dict[str, str | None] = {"out": "out", "q": "q"}
    if decode:
        ptrs.update(
            k="k_cache", v="v_cache", seqused_k="cache_seqlens",
            block_table="block_table" if a["block_table"] is not None else None,
        )  # fmt: skip
        if cfg.splits > 1:
            ptrs.update(o_accum="o_accum", lse_accum="lse_accum")
    else:
        ptrs.update(k="k", v="v", lse="lse" if a.op.endswith("_lse") else None)
        if p.flags & _flag("varlen"):
            ptrs.update(cu_seqlens_q="cu_seqlens_q", cu_seqlens_k="cu_seqlens_k")
    args = {**cfg.fields, **ptrs}
    maps: tuple[_op.TensorMap, ...] = ()
    if cfg.tile.path == "fa3":
        maps = fa3_maps(p, cfg.tile.bm, cfg.tile.bn)
        if int(cfg.fields["flags"]) & _flag("tma_out"):
            o = (int(cfg.fields["o_sb"]), int(cfg.fields["o_ss"]), int(cfg.fields["o_sh"]))
            out_map = _fa3_out_map(p, o)
            assert out_map is not None  # configure sets tma_out only where the map exists
            maps = (*maps, out_map)
    launches = [
        Launch(
            f"ak_attn_fwd_{p.dtype}_{cfg.tile.name}", cfg.grid, (cfg.block,), args, cfg.smem, maps
        )
    ]
    if cfg.splits > 1:
        launches.append(
            Launch(f"ak_attn_combine_{p.dtype}_{cfg.tile.name}", (cfg.combine_grid,),
                   (cfg.combine_block,), args)
        )  # fmt: skip
    return launches


def _env_key() -> str | None:
    return os.environ.get(ENV)


def _declare(name: str, inputs: tuple[Tensor, ...], attrs: tuple[Attr, ...], lse: bool) -> Op:
    outputs = [Output("out")]
    returns = ["out"]
    if lse:
        outputs.append(Output("lse"))
        returns.append("lse")
    if name == "attention_decode":
        outputs += [Output("o_accum", hidden=True), Output("lse_accum", hidden=True)]
    return Op(
        name=name, family=FAMILY, inputs=inputs, attrs=attrs, outputs=tuple(outputs),
        shapes=_shapes, launch=_launch, returns=tuple(returns), cache_key=_env_key,
    )  # fmt: skip


_QKV = (Tensor("q"), Tensor("k"), Tensor("v"))
_VARLEN_IN = (*_QKV, Tensor("cu_seqlens_q"), Tensor("cu_seqlens_k"))
_VARLEN_ATTRS = (Attr("max_seqlen_q", "int", 0), Attr("max_seqlen_k", "int", 0), *_COMMON)
ATTENTION = _declare("attention", _QKV, _COMMON, lse=False)
ATTENTION_LSE = _declare("attention_lse", _QKV, _COMMON, lse=True)
ATTENTION_VARLEN = _declare("attention_varlen", _VARLEN_IN, _VARLEN_ATTRS, lse=False)
ATTENTION_VARLEN_LSE = _declare("attention_varlen_lse", _VARLEN_IN, _VARLEN_ATTRS, lse=True)
ATTENTION_DECODE = _declare(
    "attention_decode",
    (Tensor("q"), Tensor("k_cache"), Tensor("v_cache"), Tensor("cache_seqlens"),
     Tensor("block_table", optional=True)),
    (Attr("causal", "bool", False), Attr("scale", "float?", None), Attr("softcap", "float?", None)),
    lse=False,
)  # fmt: skip


def _lse_flag(op: str, return_lse: Any, out: Any) -> bool:
    if not isinstance(return_lse, bool):
        raise TypeError(f"{op}: return_lse must be a bool, got {type(return_lse).__name__}")
    if return_lse and out is not None:
        raise TypeError(f"{op}: out= cannot be combined with return_lse=True")
    return return_lse


def attention(
    q: Any,
    k: Any,
    v: Any,
    causal: bool = False,
    scale: float | None = None,
    window: tuple[int, int] | None = None,
    softcap: float | None = None,
    *,
    return_lse: bool = False,
    out: Any = None,
    stream: Any = None,
) -> Any:
    """``softmax(q k^T * scale + mask) v`` per head, f32 accumulation, one rounding on store.

    Parameters
    ----------
    q : CUDA array [B, Sq, H, D], float16 or bfloat16 (bfloat16 needs sm_80+)
    k, v : CUDA arrays [B, Sk, Hkv, D], q's dtype; H must be a multiple of Hkv (GQA / MQA)
        Any strides along batch, sequence and head (multiples of 8 elements, 16-byte aligned
        data; 0 broadcasts), last dimension contiguous. D: a multiple of 8 up to 256.
    causal : bool
        Query i sees keys j <= i + Sk - Sq (bottom-right aligned when Sq != Sk).
    scale : float, optional
        Default 1 / sqrt(D).
    window : (left, right), optional
        Sliding window: query i sees keys i + Sk - Sq - left <= j <= i + Sk - Sq + right; -1
        leaves a side unbounded. With causal, right is capped at 0.
    softcap : float, optional
        Gemma-2 soft-capping: logits become softcap * tanh(logits / softcap) (0 or None: off).
    return_lse : bool
        Also return the f32 log-sum-exp of the (scaled, capped) logits, [B, H, Sq]
        (not with out=).
    out : CUDA array [B, Sq, H, D] of q's dtype, optional; must not overlap the inputs.
    stream : int or stream object, optional (see ``aotkernels.ops``)

    Returns out, or (out, lse). Rows that see no key (a window past the sequence, Sk = 0) are
    0 with an LSE of -inf. No backward: tensors that require grad (grad mode on) raise
    ``NotImplementedError``.
    """
    attrs = {"causal": causal, "scale": scale, "window": window, "softcap": softcap}
    if _lse_flag("attention", return_lse, out):
        return ATTENTION_LSE(q, k, v, stream=stream, **attrs)
    return ATTENTION(q, k, v, out=out, stream=stream, **attrs)


def attention_varlen(
    q: Any,
    k: Any,
    v: Any,
    cu_seqlens_q: Any,
    cu_seqlens_k: Any,
    max_seqlen_q: int,
    max_seqlen_k: int,
    causal: bool = False,
    scale: float | None = None,
    window: tuple[int, int] | None = None,
    softcap: float | None = None,
    *,
    return_lse: bool = False,
    out: Any = None,
    stream: Any = None,
) -> Any:
    """Attention over packed sequences (what serving engines batch with).

    q : [total_q, H, D]; k, v : [total_k, Hkv, D]; cu_seqlens_q / cu_seqlens_k : int32
    [B + 1] offsets of each sequence (non-decreasing from 0; empty sequences allowed);
    max_seqlen_q / max_seqlen_k : host ints bounding the lengths (they size the grid). Masks,
    scale, window, softcap, out and stream as in :func:`attention`, per sequence; return_lse
    gives an f32 [H, total_q] log-sum-exp.
    """
    attrs = {
        "max_seqlen_q": max_seqlen_q, "max_seqlen_k": max_seqlen_k, "causal": causal,
        "scale": scale, "window": window, "softcap": softcap,
    }  # fmt: skip
    arrays = (q, k, v, cu_seqlens_q, cu_seqlens_k)
    if _lse_flag("attention_varlen", return_lse, out):
        return ATTENTION_VARLEN_LSE(*arrays, stream=stream, **attrs)
    return ATTENTION_VARLEN(*arrays, out=out, stream=stream, **attrs)


def attention_decode(
    q: Any,
    k_cache: Any,
    v_cache: Any,
    cache_seqlens: Any,
    block_table: Any = None,
    scale: float | None = None,
    softcap: float | None = None,
    *,
    causal: bool = False,
    out: Any = None,
    stream: Any = None,
) -> Any:
    """Decode and short appends over a KV cache; split-KV (flash-decoding) for small batches.

    q : [B, Sq <= 16, H, D]. k_cache / v_cache : [B, Smax, Hkv, D] (contiguous cache), or
    [num_blocks, page_size, Hkv, D] pages (page_size >= 16) with block_table int32
    [B, max_blocks]: position j of sequence b is slot j % page_size of page
    block_table[b, j // page_size]. cache_seqlens : int32 [B], each sequence's cached length
    (new tokens included), trusted to fit the cache. causal (keyword): query i sees keys
    j <= i + len - Sq, for appends whose keys are already cached. The query heads of a KV group
    share a tile, so K/V are read once per KV head; splits are merged in a fixed order, so
    results are bitwise repeatable.
    """
    return ATTENTION_DECODE(
        q, k_cache, v_cache, cache_seqlens, block_table, causal=causal, scale=scale,
        softcap=softcap, out=out, stream=stream,
    )  # fmt: skip
