"""Attention forward: ``attention`` (dense), ``attention_varlen`` (packed) and ``attention_decode``
(KV cache, contiguous or paged, split-KV), f16 / bf16 with f32 accumulation.

One kernel template serves the three ops (arch_matrix.toml, [families.attention]): the
FlashAttention-2 design on mma.sync, built for sm_75 (f16 only) .. sm_120a and compute_80 PTX.
Causal masks, sliding windows, softcap, GQA packing, paging and split-KV are run-time flags; the
compiled head dims are the variants (64, 128, 256), and a head dim d (a multiple of 8 up to 256)
runs the smallest variant with d' >= d, the loads zero-filling the columns past d.

The module is two layers, so that an op declaration can reuse the first unchanged:

* ``validate_*`` (array metadata: shape, strides, dtype, 16-byte alignment; no device) gives a
  ``Problem``, and ``configure`` (a ``Problem``, the variants of the loaded image and the SM
  count) gives a ``Config``: every scalar kernel parameter, grid, block, shared memory and
  the split-KV workspace. Both are pure functions.
* ``_run``: allocation, pointer binding and the launch(es).

Variant choice (``_pick``): the first variant of ``_PATH_ORDER`` present in the loaded image
whose d is at least the head dim. ``AOTKERNELS_ATTENTION_PATH`` forces a path (tests run every
path a GPU can run); today ``fa2`` is the only one.
"""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from .. import loader as _loader
from ..arrays import ArrayInfo, contiguous_strides, dtype_name
from ..errors import NoKernelImageError
from ._common import Call, check_disjoint, finish, operand, output, prepare

__all__ = [
    "Config",
    "Meta",
    "Problem",
    "Tile",
    "attention",
    "attention_decode",
    "attention_varlen",
    "configure",
    "num_splits",
    "validate_decode",
    "validate_dense",
    "validate_varlen",
]

FAMILY = "attention"
DTYPES = ("f16", "bf16")
_F_VARLEN, _F_SEQUSED, _F_PAGED, _F_SPLIT = 1, 2, 4, 8
_F_PACK, _F_LSE, _F_SOFTCAP = 16, 32, 64
# Paths in order of preference; a wgmma path for sm_90a goes first once it exists.
_PATH_ORDER = ("fa2",)
_MAX_SEQ = 2**31 - 1  # sequence positions are 32-bit in the kernel
_UNBOUNDED = 2**62  # a window side without a limit
_MAX_GRID_YZ = 65535
_MAX_SPLITS = 128
_MAX_DECODE_Q = 16
_LOG2E = 1.4426950408889634


class Meta(NamedTuple):
    """What the launch configuration may depend on: no pointer, only its 16-byte alignment."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    dtype: str
    aligned: bool  # data pointer is a multiple of 16 bytes

    @staticmethod
    def of(info: ArrayInfo) -> Meta:
        return Meta(tuple(info.shape), tuple(info.strides), info.dtype, info.ptr % 16 == 0)


class Tile(NamedTuple):
    """One variant of the loaded image (arch_matrix.toml): compiled head dim and tile shape."""

    name: str
    path: str
    decode: int  # 1: a tile of attention_decode (one warp, 16 rows), 0: of the prefill ops
    d: int
    bm: int
    bn: int
    threads: int
    smem: int


class Config(NamedTuple):
    variant: str
    fields: dict[str, int | float]  # every non-pointer kernel parameter, by name
    grid: tuple[int, int, int]
    block: int
    smem: int
    out_shape: tuple[int, ...]
    lse_shape: tuple[int, ...]
    splits: int  # > 1: f32 workspace (splits, rows, d) + (splits, rows), then attn_combine
    combine_grid: int
    combine_block: int


# --- argument checks -------------------------------------------------------------------------


def _check_qkv_dtypes(op: str, q: Meta, k: Meta, v: Meta, kn: str, vn: str) -> None:
    if q.dtype not in DTYPES:
        names = ", ".join(dtype_name(d) for d in DTYPES)
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
    if not m.aligned or any(
        s % 8 for n, s in zip(m.shape[:-1], m.strides[:-1], strict=True) if n > 1
    ):
        raise ValueError(
            f"{op}: {name} must be 16-byte aligned with strides that are multiples of 8 "
            f"elements (16 bytes), got strides {m.strides} (aligned pointer: {m.aligned}); pass "
            "a contiguous copy"
        )


def _check_written(op: str, name: str, m: Meta) -> None:
    """A written array must not overlap itself: each stride clears the span of the smaller."""
    span = 1
    for n, s in sorted(
        (p for p in zip(m.shape, m.strides, strict=True) if p[0] > 1), key=lambda p: p[1]
    ):
        if s < span:
            raise ValueError(
                f"{op}: {name} must not overlap itself, got strides {m.strides} for shape {m.shape}"
            )
        span = s * n


def _window(op: str, causal: Any, window: Any) -> tuple[int, int]:
    """(left, right) bounds for the kernel; causal caps right at 0 (bottom-right aligned)."""
    if not isinstance(causal, bool):
        raise TypeError(f"{op}: causal must be a bool, got {type(causal).__name__}")
    left = right = -1
    if window is not None:
        if (
            not isinstance(window, (tuple, list))
            or len(window) != 2
            or not all(isinstance(w, int) and not isinstance(w, bool) for w in window)
        ):
            raise TypeError(
                f"{op}: window must be None or a (left, right) pair of ints, got {window!r}"
            )
        left, right = int(window[0]), int(window[1])
        if left < -1 or right < -1:
            raise ValueError(f"{op}: window sides must be >= 0, or -1 for unbounded, got {window}")
    if causal:
        right = 0 if right < 0 else min(right, 0)
    return (_UNBOUNDED if left < 0 else left), (_UNBOUNDED if right < 0 else right)


def _real(op: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)  # numpy / torch scalars
        except (TypeError, ValueError):
            raise TypeError(f"{op}: {name} must be a real number, got {value!r}") from None
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"{op}: {name} must be finite, got {x}")
    return x


def _scales(op: str, scale: Any, softcap: Any, d: int) -> tuple[float, float, int]:
    """(scale_log2, softcap_pre, flag): the kernel's logits are s = qk * scale_log2, or with a
    softcap s = tanh(qk * scale / cap) * cap * log2(e) (Gemma-2), both in the log2 domain."""
    sc = 1.0 / math.sqrt(d) if scale is None else _real(op, "scale", scale)
    cap = 0.0 if softcap is None else _real(op, "softcap", softcap)
    if cap < 0:
        raise ValueError(f"{op}: softcap must be positive (or 0 / None for none), got {cap}")
    if cap == 0:
        return sc * _LOG2E, 0.0, 0
    return cap * _LOG2E, sc / cap, _F_SOFTCAP


def _tiles(fam: Any, dtype: str) -> list[Tile]:
    """The variants of the loaded image that hold a ``dtype`` forward kernel, in path order."""
    forced = os.environ.get("AOTKERNELS_ATTENTION_PATH", "")
    if forced and forced not in _PATH_ORDER:
        raise ValueError(
            f"AOTKERNELS_ATTENTION_PATH must be one of {', '.join(_PATH_ORDER)}, got {forced!r}"
        )
    out = []
    for name, v in fam.variants.items():
        if f"ak_attn_fwd_{dtype}_{name}" not in fam.kernels:
            continue
        if forced and v["path"] != forced:
            continue
        ints = [int(v[key]) for key in ("decode", "d", "bm", "bn", "threads", "smem")]
        out.append(Tile(name, str(v["path"]), *ints))
    out.sort(key=lambda t: (_PATH_ORDER.index(t.path), t.d))
    return out


def _pick(op: str, tiles: Sequence[Tile], d: int, dtype: str, where: str) -> Tile:
    decode = int(op == "attention_decode")
    for t in tiles:
        if t.d >= d and t.decode == decode:
            return t
    raise NoKernelImageError(
        f"{op}: no {dtype_name(dtype)} attention kernel for head dim {d} on {where}; "
        f"{dtype_name(dtype)} needs tensor cores this GPU lacks (bf16: sm_80+)"
    )


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


def _out_checks(op: str, out: Meta | None, shape: tuple[int, ...], dtype: str) -> None:
    if out is None:
        return
    if tuple(out.shape) != shape:
        raise ValueError(f"{op}: out.shape must be {shape}, got {out.shape}")
    if out.dtype != dtype:
        raise TypeError(f"{op}: out.dtype must be {dtype_name(dtype)}, got {dtype_name(out.dtype)}")
    _check_layout(op, "out", out)
    _check_written(op, "out", out)


# --- validation and configuration (pure) -----------------------------------------------------


class Problem(NamedTuple):
    """A validated call, independent of the device: what ``configure`` turns into a launch."""

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
    o: tuple[int, int, int]
    window: tuple[int, int]
    scale_log2: float
    softcap_pre: float
    flags: int  # everything but pack / split, which depend on the tile
    out_shape: tuple[int, ...]
    lse_shape: tuple[int, ...]
    lse: tuple[int, int]  # (batch, head) strides of the LSE
    page_size: int = 0
    bt_sb: int = 0


def _strides3(m: Meta) -> tuple[int, int, int]:
    if len(m.strides) == 4:
        return m.strides[0], m.strides[1], m.strides[2]
    return 0, m.strides[0], m.strides[1]


def _out_strides(out: Meta | None, shape: tuple[int, ...]) -> tuple[int, int, int]:
    if out is not None:
        return _strides3(out)
    return _strides3(Meta(shape, tuple(contiguous_strides(shape)), "", True))


def validate_dense(
    q: Meta,
    k: Meta,
    v: Meta,
    out: Meta | None,
    causal: Any,
    scale: Any,
    window: Any,
    softcap: Any,
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
    _out_checks(op, out, tuple(q.shape), q.dtype)
    win = _window(op, causal, window)
    scale_log2, pre, flags = _scales(op, scale, softcap, d)
    flags |= _F_LSE if return_lse else 0
    shape = tuple(q.shape)
    return Problem(
        op,
        q.dtype,
        b,
        sq,
        sk,
        h,
        hkv,
        d,
        _strides3(q),
        _strides3(k),
        _strides3(v),
        _out_strides(out, shape),
        win,
        scale_log2,
        pre,
        flags,
        shape,
        (b, h, sq),
        (h * sq, sq),
    )


def _seqlens_meta(op: str, name: str, m: Meta, n: int | None) -> int:
    if m.dtype != "int32":
        raise TypeError(f"{op}: {name}.dtype must be int32, got {dtype_name(m.dtype)}")
    if len(m.shape) != 1 or (n is not None and m.shape[0] != n):
        want = f"({n},)" if n is not None else "1-D [batch + 1]"
        raise ValueError(f"{op}: {name}.shape must be {want}, got {m.shape}")
    if m.shape[0] > 1 and m.strides[0] != 1:
        raise ValueError(f"{op}: {name} must be contiguous, got stride {m.strides[0]}")
    return m.shape[0]


def _max_len(op: str, name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be an int, got bool")
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an int, got {type(value).__name__}") from None
    if not 0 <= n <= _MAX_SEQ:
        raise ValueError(f"{op}: {name} must be in [0, 2**31 - 1], got {n}")
    return n


def validate_varlen(
    q: Meta,
    k: Meta,
    v: Meta,
    cu_q: Meta,
    cu_k: Meta,
    max_seqlen_q: Any,
    max_seqlen_k: Any,
    out: Meta | None,
    causal: Any,
    scale: Any,
    window: Any,
    softcap: Any,
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
    msq = _max_len(op, "max_seqlen_q", max_seqlen_q)
    msk = _max_len(op, "max_seqlen_k", max_seqlen_k)
    if max(total_q, k.shape[0]) > _MAX_SEQ:
        raise ValueError(
            f"{op}: packed lengths must be below 2**31, got {max(total_q, k.shape[0])}"
        )
    for name, m in (("q", q), ("k", k), ("v", v)):
        _check_layout(op, name, m)
    _out_checks(op, out, tuple(q.shape), q.dtype)
    win = _window(op, causal, window)
    scale_log2, pre, flags = _scales(op, scale, softcap, d)
    flags |= _F_VARLEN | (_F_LSE if return_lse else 0)
    shape = tuple(q.shape)
    return Problem(
        op,
        q.dtype,
        nb - 1,
        msq,
        msk,
        h,
        hkv,
        d,
        _strides3(q),
        _strides3(k),
        _strides3(v),
        _out_strides(out, shape),
        win,
        scale_log2,
        pre,
        flags,
        shape,
        (h, total_q),
        (0, total_q),
    )


def validate_decode(
    q: Meta,
    k: Meta,
    v: Meta,
    seqlens: Meta,
    block_table: Meta | None,
    out: Meta | None,
    causal: Any,
    scale: Any,
    softcap: Any,
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
    flags = _F_SEQUSED
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
        if page < 16:
            raise ValueError(f"{op}: the page size (k_cache.shape[1]) must be >= 16, got {page}")
        capacity = page * block_table.shape[1]
        bt_sb = block_table.strides[0]
        flags |= _F_PAGED
    if capacity > _MAX_SEQ:
        raise ValueError(f"{op}: the cache holds at most 2**31 - 1 positions, got {capacity}")
    for name, m in (("q", q), ("k_cache", k), ("v_cache", v)):
        _check_layout(op, name, m)
    _out_checks(op, out, tuple(q.shape), q.dtype)
    win = _window(op, causal, None)
    scale_log2, pre, cap_flag = _scales(op, scale, softcap, d)
    shape = tuple(q.shape)
    return Problem(
        op,
        q.dtype,
        b,
        sq,
        capacity,
        h,
        hkv,
        d,
        _strides3(q),
        _strides3(k),
        _strides3(v),
        _out_strides(out, shape),
        win,
        scale_log2,
        pre,
        flags | cap_flag,
        shape,
        (b, h, sq),
        (h * sq, sq),
        page,
        bt_sb,
    )


def num_splits(ctas: int, key_tiles: int, sm_count: int) -> int:
    """Split-KV factor of a decode launch: about 4 one-warp CTAs per SM (what keeps enough
    K / V tiles in flight to stream the cache), each split keeping at least 4 key tiles so that
    its partial is worth the combine."""
    target = 4 * sm_count
    if ctas >= target or key_tiles < 8:
        return 1
    return max(1, min(target // ctas, key_tiles // 4, _MAX_SPLITS))


def configure(
    p: Problem, tiles: Sequence[Tile], sm_count: int, where: str = "this device"
) -> Config:
    """The launch of a validated problem on a device with these variants and SMs."""
    tile = _pick(p.op, tiles, p.d, p.dtype, where)
    group = p.heads // p.kv_heads
    decode = p.op == "attention_decode"
    # GQA packing: a group's query heads share the tile when the queries are too few to fill it
    # (always for decode): K/V are then read once per KV head.
    pack = group > 1 and (decode or p.sq * group <= tile.bm)
    rows = p.sq * group if pack else p.sq
    slots = p.kv_heads if pack else p.heads
    m_blocks = max(1, math.ceil(rows / tile.bm))
    splits = 1
    if decode:
        splits = num_splits(m_blocks * slots * p.batch, math.ceil(p.sk / tile.bn), sm_count)
    if slots > _MAX_GRID_YZ:
        raise ValueError(f"{p.op}: at most {_MAX_GRID_YZ} heads per launch, got {slots}")
    if p.batch * splits > _MAX_GRID_YZ:
        raise ValueError(f"{p.op}: at most {_MAX_GRID_YZ} sequences per launch, got {p.batch}")
    flags = p.flags | (_F_PACK if pack else 0) | (_F_SPLIT if splits > 1 else 0)
    acc_rows = p.batch * p.heads * p.sq
    fields: dict[str, int | float] = {
        "q_sb": p.q[0],
        "q_ss": p.q[1],
        "q_sh": p.q[2],
        "k_sb": p.k[0],
        "k_ss": p.k[1],
        "k_sh": p.k[2],
        "v_sb": p.v[0],
        "v_ss": p.v[1],
        "v_sh": p.v[2],
        "o_sb": p.o[0],
        "o_ss": p.o[1],
        "o_sh": p.o[2],
        "lse_sb": p.lse[0],
        "lse_sh": p.lse[1],
        "acc_split": acc_rows,
        "bt_sb": p.bt_sb,
        "window_left": p.window[0],
        "window_right": p.window[1],
        "batch": p.batch,
        "heads": p.heads,
        "kv_heads": p.kv_heads,
        "d": p.d,
        "seqlen_q": p.sq,
        "seqlen_k": p.sk,
        "page_size": p.page_size,
        "num_splits": splits,
        "flags": flags,
        "scale_log2": p.scale_log2,
        "softcap_pre": p.softcap_pre,
    }
    warps = tile.threads // 32
    return Config(
        tile.name,
        fields,
        (m_blocks, slots, p.batch * splits),
        tile.threads,
        tile.smem,
        p.out_shape,
        p.lse_shape,
        splits,
        math.ceil(acc_rows / warps),
        tile.threads,
    )


# --- binding and launch ----------------------------------------------------------------------


def _no_grad(op: str, arrays: Sequence[tuple[str, Any]]) -> None:
    """No backward here: a tensor that wants gradients must not silently lose them."""
    for name, a in arrays:
        if getattr(a, "requires_grad", False) is True and type(a).__module__.startswith("torch"):
            import torch

            if torch.is_grad_enabled():
                raise NotImplementedError(
                    f"{op}: {name} requires grad, and the backward pass is not implemented; "
                    "call it under torch.no_grad() or pass detached tensors"
                )


def _launch(
    fam: Any,
    symbol: str,
    grid: tuple[int, int, int],
    block: int,
    smem: int,
    fields: Mapping[str, int | float],
    ptrs: Mapping[str, int],
    stream: int,
) -> None:
    from .. import _core

    values = [
        ptrs.get(name, 0) if name not in fields else fields[name] for name in fam.field_offsets
    ]
    plan = _core.LaunchPlan(
        symbol,
        fam.kernels[symbol],
        fam.device.context,
        list(grid),
        [block, 1, 1],
        smem,
        fam.params.pack(*values),
        fam.ptr_offsets,
    )
    plan(stream)


def _hold(call: Call, arrays: Sequence[Any]) -> None:
    """Keep the split-KV workspace alive until the launch stream has used it: torch's caching
    allocator orders reuse only on the stream it allocated on (its current one)."""
    if call.x.fw.name != "torch":
        return
    import torch

    dev = call.x.device
    if call.stream == torch.cuda.current_stream(dev).cuda_stream:
        return
    external: Any = torch.cuda.ExternalStream  # untyped in torch's stubs
    ext = external(call.stream, device=dev)
    for a in arrays:
        a.record_stream(ext)


def _run(
    call: Call,
    p: Problem,
    ptrs: dict[str, int],
    out: Any,
    return_lse: bool,
) -> Any:
    """Allocate out / lse / workspace, configure for the device, bind pointers, launch."""
    res, oi = output(p.op, call, out, p.out_shape, p.dtype)
    ptrs["out"] = oi.ptr
    lse_obj = None
    if return_lse:
        lse_obj, li = output(p.op, call, None, p.lse_shape, "f32")
        ptrs["lse"] = li.ptr
    if math.prod(p.out_shape) and p.batch:
        fam = _loader.family_on(FAMILY, call.x.device)
        dev = fam.device
        where = (
            f"device {dev.index} ({dev.name}, cc {dev.cc_str}) running image {fam.choice.target}"
        )
        cfg = configure(p, _tiles(fam, p.dtype), dev.sm_count, where)
        work: list[Any] = []
        if cfg.splits > 1:
            rows = int(cfg.fields["acc_split"])
            o_acc, oa = output(p.op, call, None, (cfg.splits, rows, p.d), "f32")
            l_acc, la = output(p.op, call, None, (cfg.splits, rows), "f32")
            ptrs["o_accum"], ptrs["lse_accum"] = oa.ptr, la.ptr
            work = [o_acc, l_acc]
        fwd = f"ak_attn_fwd_{p.dtype}_{cfg.variant}"
        _launch(fam, fwd, cfg.grid, cfg.block, cfg.smem, cfg.fields, ptrs, call.stream)
        if cfg.splits > 1:
            comb = f"ak_attn_combine_{p.dtype}_{cfg.variant}"
            _launch(
                fam,
                comb,
                (cfg.combine_grid, 1, 1),
                cfg.combine_block,
                0,
                cfg.fields,
                ptrs,
                call.stream,
            )
            _hold(call, work)
    result = finish(call, res, out is None)
    if lse_obj is None:
        return result
    return result, finish(call, lse_obj, True)


def _inputs(
    op: str, q: Any, stream: Any, others: Sequence[tuple[str, Any]], out: Any
) -> tuple[Call, dict[str, ArrayInfo], Meta | None]:
    """Read every array (same device as q); out must not overlap any input."""
    _no_grad(op, [("q", q), *others])
    call = prepare(op, q, stream, "q")
    infos = {"q": call.x}
    for name, a in others:
        if a is not None:
            infos[name] = operand(op, name, a, call)
    if out is None:
        return call, infos, None
    oi = operand(op, "out", out, call)
    for name, info in infos.items():
        check_disjoint(op, "out", oi, name, info)
    return call, infos, Meta.of(oi)


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
        Also return the f32 log-sum-exp of the (scaled, capped) logits, [B, H, Sq].
    out : CUDA array [B, Sq, H, D] of q's dtype, optional; must not overlap the inputs.
    stream : int or stream object, optional
        Defaults to the current stream of q's framework.

    Returns out, or (out, lse). Rows that see no key (a window past the sequence, Sk = 0) are
    0 with an LSE of -inf. No backward: tensors that require grad (grad mode on) raise
    ``NotImplementedError``.
    """
    op = "attention"
    call, infos, om = _inputs(op, q, stream, [("k", k), ("v", v)], out)
    p = validate_dense(
        Meta.of(infos["q"]),
        Meta.of(infos["k"]),
        Meta.of(infos["v"]),
        om,
        causal,
        scale,
        window,
        softcap,
        bool(return_lse),
    )
    ptrs = {"q": infos["q"].ptr, "k": infos["k"].ptr, "v": infos["v"].ptr}
    return _run(call, p, ptrs, out, bool(return_lse))


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
    op = "attention_varlen"
    others = [("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)]
    call, infos, om = _inputs(op, q, stream, others, out)
    p = validate_varlen(
        Meta.of(infos["q"]),
        Meta.of(infos["k"]),
        Meta.of(infos["v"]),
        Meta.of(infos["cu_seqlens_q"]),
        Meta.of(infos["cu_seqlens_k"]),
        max_seqlen_q,
        max_seqlen_k,
        om,
        causal,
        scale,
        window,
        softcap,
        bool(return_lse),
    )
    ptrs = {n: infos[n].ptr for n in ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k")}
    return _run(call, p, ptrs, out, bool(return_lse))


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
    op = "attention_decode"
    others = [
        ("k_cache", k_cache),
        ("v_cache", v_cache),
        ("cache_seqlens", cache_seqlens),
        ("block_table", block_table),
    ]
    call, infos, om = _inputs(op, q, stream, others, out)
    bt = infos.get("block_table")
    p = validate_decode(
        Meta.of(infos["q"]),
        Meta.of(infos["k_cache"]),
        Meta.of(infos["v_cache"]),
        Meta.of(infos["cache_seqlens"]),
        Meta.of(bt) if bt is not None else None,
        om,
        causal,
        scale,
        softcap,
    )
    ptrs = {
        "q": infos["q"].ptr,
        "k": infos["k_cache"].ptr,
        "v": infos["v_cache"].ptr,
        "seqused_k": infos["cache_seqlens"].ptr,
        "block_table": bt.ptr if bt is not None else 0,
    }
    return _run(call, p, ptrs, out, False)
