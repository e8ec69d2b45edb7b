"""``bench rope``: ak.rope in place on q / k slices of a fused QKV buffer (Llama-3-8B heads: 32
q, 8 kv, head_dim 128; NeoX full and half rotary, GPT-J) beside the transformers formula
(rotate_half, out of place) eager and under torch.compile, tokens {1, 32, 4096, 16384}."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from typing import Any

from . import reference
from .common import FLOAT_DTYPES, Row, check, compiled, dtypes
from .timing import cuda_torch, input_sets, rotate, time_gpu

TITLE = "RoPE (q and k in place) vs the transformers formula"
TOKENS = (1, 32, 4096, 16384)
HEADS = (32, 8, 128)  # Llama-3-8B: q heads, kv heads, head_dim
CASES = (("neox", 128), ("neox", 64), ("gptj", 128))  # layout, rot_dim
MAX_POS = 8192


def formula(neox: bool) -> Callable[..., tuple[Any, Any]]:
    """transformers' rotary step on q and k, out of place, in their dtype (cos / sin once)."""

    def f(q: Any, k: Any, pos: Any, cache: Any) -> tuple[Any, Any]:
        cos, sin = reference.rope_cos_sin(pos, cache, neox, q.dtype)
        return reference.rope_rotate(q, cos, sin, neox), reference.rope_rotate(k, cos, sin, neox)

    return f


def compare(ours: Callable[..., Any], neox: bool, q: Any, k: Any, pos: Any, cache: Any) -> str:
    """``ours`` (ak.rope: q and k rotated in place, returned) on copies of q and k against the
    fp32 reference."""
    want = [reference.rope(t, pos, cache, neox) for t in (q, k)]
    got = ours(q.clone(), k.clone(), pos, cache, is_neox=neox)
    whys = (reference.close(g, e, "rope") for g, e in zip(got, want, strict=True))
    return "; ".join(w for w in whys if w)


def run(args: argparse.Namespace) -> list[Row]:
    torch = cuda_torch()
    import aotkernels as ak

    hq, hk, hd = HEADS
    rows: list[Row] = []
    for dtype_name in dtypes(args, list(FLOAT_DTYPES), ("bf16",)):
        dtype = getattr(torch, FLOAT_DTYPES[dtype_name])
        size = torch.finfo(dtype).bits // 8
        for layout, rot in CASES:
            neox = layout == "neox"
            cache = reference.rope_cache(MAX_POS, rot)
            eager = formula(neox)
            comp = compiled(args, torch, eager)
            for tokens in TOKENS:
                width = (hq + 2 * hk) * hd
                bufs = [torch.randn(tokens, width, device="cuda", dtype=dtype)
                        for _ in range(input_sets(tokens * width * size))]  # fmt: skip
                qs = [b[:, : hq * hd].view(tokens, hq, hd) for b in bufs]
                ks = [b[:, hq * hd : (hq + hk) * hd].view(tokens, hk, hd) for b in bufs]
                pos = torch.randint(0, MAX_POS, (tokens,), device="cuda")
                ok = check(compare, ak.rope, neox, qs[0], ks[0], pos, cache)
                # Bytes: the rotated part of q and k read and written once, cos/sin rows read.
                moved = 2 * tokens * (hq + hk) * rot * size + tokens * rot * 4

                inputs = (qs, ks, [pos], [cache])
                t_ours = time_gpu(rotate(partial(ak.rope, is_neox=neox), *inputs))
                t_eager = time_gpu(rotate(eager, *inputs))
                t_comp = time_gpu(rotate(comp, *inputs)) if comp is not None else None
                rows.append({
                    "layout": layout, "rot_dim": rot, "dtype": dtype_name, "tokens": tokens,
                    "check": ok, "ours_us": 1e3 * t_ours, "eager_us": 1e3 * t_eager,
                    "compile_us": 1e3 * t_comp if t_comp else None,
                    "ours_TBps": moved / t_ours / 1e9,
                    "vs_eager": t_eager / t_ours,
                    "vs_compile": t_comp / t_ours if t_comp else None,
                })  # fmt: skip
                bufs.clear()
                torch.cuda.empty_cache()
    return rows
