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

from .. import loader as _loader
from ..arrays import ITEMSIZE, dtype_name
from ._op import Args, Attr, Launch, Meta, Op, OutSpec, Tensor, check_dtype, check_vector

__all__ = ["rope"]

FAMILY = "rope"
BLOCKS_PER_SM = 16


def _heads(op: str, arg: str, meta: Meta) -> tuple[int, int, int, int, int]:
    """(tokens, heads, head_dim, token stride, head stride) of a [tokens, heads, head_dim] array
    whose last dimension is contiguous (the runner checks that no two elements overlap)."""
    if len(meta.shape) != 3:
        raise ValueError(
            f"{op}: {arg} must be 3-D [tokens, heads, head_dim], got shape {tuple(meta.shape)}"
        )
    (t, h, d), (ts, hs, ds) = meta.shape, meta.strides
    if d > 1 and ds != 1:
        raise ValueError(
            f"{op}: {arg} must have a contiguous last dimension (stride 1), got strides "
            f"{tuple(meta.strides)}; pass a contiguous copy"
        )
    return t, h, d, ts, hs


def _launch_config(
    tokens: int, items: int, sm_count: int
) -> tuple[tuple[int, int], tuple[int, int]]:
    """block.x covers a token's items (a power of two in [32, 256]), block.y the tokens that
    fill the rest of the block (threads: the kernel's block size); the grid covers the tokens,
    capped (the kernel grid-strides)."""
    threads = _loader.constants(FAMILY)["threads"]
    bx = 32
    while bx < threads and bx < items:
        bx *= 2
    by = threads // bx
    blocks = min(-(-tokens // by), sm_count * BLOCKS_PER_SM, 2**31 - 1)
    return (max(1, blocks), 1), (bx, by)


def _shapes(a: Args) -> tuple[OutSpec, ...]:
    """Every check; rope writes q and k in place and has no output."""
    op = a.op
    q, k = a.need("q"), a.need("k")
    check_dtype(op, "q", q, _loader.dtypes(FAMILY))
    tokens, _, head_dim, _, _ = _heads(op, "q", q)
    if k.dtype != q.dtype:
        raise TypeError(
            f"{op}: k.dtype must be {dtype_name(q.dtype)} (the dtype of q), got "
            f"{dtype_name(k.dtype)}"
        )
    k_tokens, _, k_dim, _, _ = _heads(op, "k", k)
    if (k_tokens, k_dim) != (tokens, head_dim):
        raise ValueError(
            f"{op}: k.shape must be ({tokens}, heads_k, {head_dim}) (tokens and head_dim of q), "
            f"got {tuple(k.shape)}"
        )
    pos = a.need("positions")
    check_dtype(op, "positions", pos, ("int64", "int32"))
    check_vector(op, "positions", pos, tokens, "one per token of q")
    cache = a.need("cos_sin_cache")
    check_dtype(op, "cos_sin_cache", cache, tuple(dict.fromkeys(("f32", q.dtype))))
    if len(cache.shape) != 2:
        raise ValueError(
            f"{op}: cos_sin_cache must be 2-D [max_pos, rot_dim], got shape {tuple(cache.shape)}"
        )
    rot_dim = cache.shape[1]
    if rot_dim % 2 or not 2 <= rot_dim <= head_dim:
        raise ValueError(
            f"{op}: cos_sin_cache.shape[1] (rot_dim) must be even and in [2, {head_dim}] "
            f"(head_dim), got {rot_dim}"
        )
    if cache.strides[1] != 1:
        raise ValueError(
            f"{op}: cos_sin_cache must have a contiguous last dimension (stride 1), got "
            f"strides {tuple(cache.strides)}; pass a contiguous copy"
        )
    return ()


def _launch(a: Args) -> list[Launch]:
    q, k = a.need("q"), a.need("k")
    pos, cache = a.need("positions"), a.need("cos_sin_cache")
    tokens, heads_q, _, q_ts, q_hs = _heads(a.op, "q", q)
    _, heads_k, _, k_ts, k_hs = _heads(a.op, "k", k)
    max_pos, rot_dim = cache.shape
    if tokens == 0 or heads_q + heads_k == 0:
        return []  # nothing to rotate, no launch
    neox = a.attr("is_neox")
    vec = 16 // ITEMSIZE[q.dtype]
    strides = [s for s, n in ((q_ts, tokens), (q_hs, heads_q), (k_ts, tokens), (k_hs, heads_k))
               if n > 1]  # fmt: skip
    # Packets need q and k 16-byte aligned, their strides in whole packets and whole packets
    # per half (NeoX) or per rotated span (GPT-J).
    packed = (
        q.align == 16
        and k.align == 16
        and all(s % vec == 0 for s in strides)
        and (rot_dim // 2 if neox else rot_dim) % vec == 0
    )
    bit = _loader.constants(FAMILY)["flags"]
    flags = (
        (bit["neox"] if neox else 0)
        | (bit["pos_int32"] if pos.dtype == "int32" else 0)
        | (bit["cache_f32"] if cache.dtype == "f32" else 0)
        | (bit["vector"] if packed else 0)
    )
    pairs_per_item = (vec if neox else vec // 2) if packed else 1
    items = (heads_q + heads_k) * (rot_dim // 2 // pairs_per_item)
    grid, block = _launch_config(tokens, items, a.sm_count)
    args = {
        "q": "q", "k": "k", "positions": "positions", "cos_sin": "cos_sin_cache",
        "tokens": tokens, "heads_q": heads_q, "heads_k": heads_k, "rot_dim": rot_dim,
        "q_token_stride": q_ts, "q_head_stride": q_hs, "k_token_stride": k_ts,
        "k_head_stride": k_hs, "cache_stride": cache.strides[0], "max_pos": max_pos,
        "flags": flags,
    }  # fmt: skip
    return [Launch(f"ak_rope_{q.dtype}", grid, block, args)]


ROPE = Op(
    name="rope",
    family=FAMILY,
    inputs=(
        Tensor("q", mutated=True),
        Tensor("k", mutated=True),
        Tensor("positions"),
        Tensor("cos_sin_cache"),
    ),
    attrs=(Attr("is_neox", "bool", True),),
    outputs=(),
    shapes=_shapes,
    launch=_launch,
    returns=("q", "k"),
)


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
        Updated in place; must not overlap q (nor may either overlap itself).
    positions : CUDA array [tokens], int64 or int32, contiguous
        Positions outside ``[0, max_pos)`` are not supported: the kernel leaves those tokens'
        q and k unrotated rather than read outside the cache, and raises nothing (checking
        would cost a device-to-host sync per call).
    cos_sin_cache : CUDA array [max_pos, rot_dim], float32 or q's dtype
        Row p: ``cos(p * inv_freq)`` then ``sin(p * inv_freq)`` (rot_dim / 2 each); rot_dim
        even and at most head_dim; last dimension contiguous, any row stride.
    is_neox : bool
        NeoX layout (default) or GPT-J layout.
    stream : int or stream object, optional (see ``aotkernels.ops``)

    Returns
    -------
    (q, k) : the two inputs, rotated. Math is f32 with one rounding on store.
    """
    res: tuple[Any, Any] = ROPE(q, k, positions, cos_sin_cache, is_neox=is_neox, stream=stream)
    return res
