"""Rotary position embedding (RoPE) in place on q and k: ``rope``.

The ``apply_rope_with_cos_sin_cache`` convention of vLLM and FlashInfer: q [tokens, heads_q,
head_dim] and k [tokens, heads_k, head_dim] (any token and head strides, e.g. slices of a fused
QKV buffer; the last dimension contiguous), one position per token, a cos/sin cache
[max_pos, rot_dim] whose row holds rot_dim / 2 cosines then rot_dim / 2 sines. NeoX (rotate
halves) and GPT-J (interleaved pairs) layouts; rot_dim < head_dim rotates the first rot_dim
elements of each head and leaves the rest untouched. f32 / f16 / bf16, f32 math.
"""

from __future__ import annotations

from typing import Any

from .. import device as _device
from ..arrays import ITEMSIZE, ArrayInfo, dtype_name
from ._common import check_disjoint, check_dtype, make_plan, operand, prepare, remember, torch_fast

__all__ = ["rope"]

FAMILY = "rope"
DTYPES = ("f32", "f16", "bf16")
# ak_rope_params.flags (kernels/rope/rope.cuh)
_NEOX, _POS_INT32, _CACHE_F32, _VECTOR = 1, 2, 4, 8
THREADS = 256  # per block: block.x walks a token's items, block.y stacks tokens
BLOCKS_PER_SM = 16


def _heads(op: str, arg: str, info: ArrayInfo) -> tuple[int, int, int, int, int]:
    """(tokens, heads, head_dim, token stride, head stride) of a [tokens, heads, head_dim] array
    whose last dimension is contiguous and whose elements do not overlap."""
    if len(info.shape) != 3:
        raise ValueError(
            f"{op}: {arg} must be 3-D [tokens, heads, head_dim], got shape {tuple(info.shape)}"
        )
    (t, h, d), (ts, hs, ds) = info.shape, info.strides
    if d > 1 and ds != 1:
        raise ValueError(
            f"{op}: {arg} must have a contiguous last dimension (stride 1), got strides "
            f"{tuple(info.strides)}; pass a contiguous copy"
        )
    # No two elements may share memory: the kernel writes each once, from one thread.
    dims = sorted(((abs(s), n) for s, n in ((ts, t), (hs, h)) if n > 1), key=lambda e: e[0])
    reach = d
    for stride, n in dims:
        if stride < reach:
            raise ValueError(
                f"{op}: {arg} must not overlap itself, got strides {tuple(info.strides)} for "
                f"shape {tuple(info.shape)}"
            )
        reach = stride * n
    return t, h, d, ts, hs


def _launch_config(
    tokens: int, items: int, sm_count: int
) -> tuple[tuple[int, int], tuple[int, int]]:
    """block.x covers a token's items (a power of two in [32, 256]), block.y the tokens that
    fill the rest of the block; the grid covers the tokens, capped (the kernel grid-strides)."""
    bx = 32
    while bx < THREADS and bx < items:
        bx *= 2
    by = THREADS // bx
    blocks = min(-(-tokens // by), sm_count * BLOCKS_PER_SM, 2**31 - 1)
    return (max(1, blocks), 1), (bx, by)


def rope(
    q: Any,
    k: Any,
    positions: Any,
    cos_sin_cache: Any,
    is_neox: bool = True,
    *,
    stream: Any = None,
) -> tuple[Any, Any]:
    """Rotate q and k in place by the angles of their tokens' positions.

    For each token t with position ``p = positions[t]`` and pair i < rot_dim / 2, with
    ``c = cos_sin_cache[p, i]`` and ``s = cos_sin_cache[p, rot_dim / 2 + i]``::

        x1' = x1 * c - x2 * s
        x2' = x2 * c + x1 * s

    where (x1, x2) is ``(x[i], x[i + rot_dim / 2])`` when ``is_neox`` (rotate halves, as
    ``rotate_half`` in transformers) and ``(x[2 i], x[2 i + 1])`` otherwise (GPT-J,
    interleaved), for every head of q and k. Elements past rot_dim are not touched.

    Parameters
    ----------
    q : CUDA array [tokens, heads_q, head_dim], float32 / float16 / bfloat16
        Any token and head strides (slices of a fused QKV buffer work); last dimension
        contiguous. Updated in place; must be mutable (not JAX).
    k : CUDA array [tokens, heads_k, head_dim], q's dtype, device and head_dim
        Updated in place; must not overlap q.
    positions : CUDA array [tokens], int64 or int32, contiguous
        Positions outside ``[0, max_pos)`` are not supported: the kernel leaves those tokens'
        q and k unrotated rather than read outside the cache, and raises nothing (checking
        would cost a device-to-host sync per call).
    cos_sin_cache : CUDA array [max_pos, rot_dim], float32 or q's dtype
        Row p: ``cos(p * inv_freq)`` then ``sin(p * inv_freq)`` (rot_dim / 2 each); rot_dim
        even and at most head_dim; last dimension contiguous, any row stride.
    is_neox : bool
        NeoX layout (default) or GPT-J layout.
    stream : int or stream object, optional
        Defaults to the current stream of q's framework.

    Returns
    -------
    (q, k) : the two inputs, rotated. Math is f32 with one rounding on store.
    """
    op = "rope"
    neox = is_neox if isinstance(is_neox, bool) else None
    hit, key = (
        torch_fast("ak_rope_", q, (k, positions, cos_sin_cache), stream, neox)
        if neox is not None
        else (None, None)
    )
    if hit is not None:
        return q, k
    if neox is None:
        raise TypeError(f"{op}: is_neox must be a bool, got {type(is_neox).__name__}")
    call = prepare(op, q, stream, "q")
    qi = call.x
    check_dtype(op, "q", qi, DTYPES)
    if not qi.fw.mutable:
        raise TypeError(
            f"{op}: q must be a mutable array (the op rotates q and k in place), got an "
            f"immutable {qi.fw.name} array"
        )
    tokens, heads_q, head_dim, q_ts, q_hs = _heads(op, "q", qi)
    ki = operand(op, "k", k, call)
    if ki.dtype != qi.dtype:
        raise TypeError(
            f"{op}: k.dtype must be {dtype_name(qi.dtype)} (the dtype of q), got "
            f"{dtype_name(ki.dtype)}"
        )
    k_tokens, heads_k, k_dim, k_ts, k_hs = _heads(op, "k", ki)
    if (k_tokens, k_dim) != (tokens, head_dim):
        raise ValueError(
            f"{op}: k.shape must be ({tokens}, heads_k, {head_dim}) (tokens and head_dim of q), "
            f"got {tuple(ki.shape)}"
        )
    pi = operand(op, "positions", positions, call)
    check_dtype(op, "positions", pi, ("int64", "int32"))
    if tuple(pi.shape) != (tokens,):
        raise ValueError(
            f"{op}: positions.shape must be ({tokens},) (one per token of q), got {tuple(pi.shape)}"
        )
    if tokens > 1 and pi.strides[0] != 1:
        raise ValueError(
            f"{op}: positions must be contiguous (stride 1), got stride {pi.strides[0]}; pass "
            "a contiguous copy"
        )
    ci = operand(op, "cos_sin_cache", cos_sin_cache, call)
    check_dtype(op, "cos_sin_cache", ci, tuple(dict.fromkeys(("f32", qi.dtype))))
    if len(ci.shape) != 2:
        raise ValueError(
            f"{op}: cos_sin_cache must be 2-D [max_pos, rot_dim], got shape {tuple(ci.shape)}"
        )
    max_pos, rot_dim = ci.shape
    if rot_dim % 2 or not 2 <= rot_dim <= head_dim:
        raise ValueError(
            f"{op}: cos_sin_cache.shape[1] (rot_dim) must be even and in [2, {head_dim}] "
            f"(head_dim), got {rot_dim}"
        )
    if ci.strides[1] != 1:
        raise ValueError(
            f"{op}: cos_sin_cache must have a contiguous last dimension (stride 1), got "
            f"strides {tuple(ci.strides)}; pass a contiguous copy"
        )
    check_disjoint(op, "q", qi, "k", ki)
    for name, info in (("positions", pi), ("cos_sin_cache", ci)):
        check_disjoint(op, "q", qi, name, info)
        check_disjoint(op, "k", ki, name, info)
    if tokens == 0 or heads_q + heads_k == 0:
        return q, k  # nothing to rotate, no launch

    item = ITEMSIZE[qi.dtype]
    vec = 16 // item
    ptrs = (qi.ptr, ki.ptr, pi.ptr, ci.ptr)
    strides = [s for s, n in ((q_ts, tokens), (q_hs, heads_q), (k_ts, tokens), (k_hs, heads_k))
               if n > 1]  # fmt: skip
    # Packets need every pointer 16-byte aligned (the torch fast path keys on exactly that),
    # row strides in whole packets and whole packets per half (NeoX) or per rotated span.
    packed = (
        all(p % 16 == 0 for p in ptrs)
        and all(s % vec == 0 for s in strides)
        and (rot_dim // 2 if neox else rot_dim) % vec == 0
    )
    flags = (
        (_NEOX if neox else 0)
        | (_POS_INT32 if pi.dtype == "int32" else 0)
        | (_CACHE_F32 if ci.dtype == "f32" else 0)
        | (_VECTOR if packed else 0)
    )
    pairs_per_item = (vec if neox else vec // 2) if packed else 1
    items = (heads_q + heads_k) * (rot_dim // 2 // pairs_per_item)
    sms = _device.device_info(qi.device).sm_count
    grid, block = _launch_config(tokens, items, sms)
    plan = make_plan(FAMILY, f"ak_rope_{qi.dtype}", qi.device, grid, block, *ptrs, tokens,
                     heads_q, heads_k, rot_dim, q_ts, q_hs, k_ts, k_hs, ci.strides[0],
                     max_pos, flags)  # fmt: skip
    plan(call.stream, *ptrs)
    remember(key, plan, (qi, ki, pi, ci), allocated=False, written=(0, 1), may_alias=False)
    return q, k
