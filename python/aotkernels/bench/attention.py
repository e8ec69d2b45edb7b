"""``bench attention``: ak.attention beside torch SDPA's flash and cuDNN backends: D {64, 128,
256}, N {512 .. 16384} at 16384 tokens per batch, H = 2048 / D, causal and not (FLOPs
4*B*H*N^2*D, halved when causal); ak.attention_decode (Sq 1, H 32, Hkv 8, D 128) KV-cache TB/s
beside SDPA and the device copy, contiguous and paged (64-token pages); ak.attention_varlen on a
mixed batch beside SDPA flash on the batch padded to its longest sequence. The first case of
each set (the shortest sequences, whose fp32 reference fits in memory) is checked against
``reference.attention``; every forward row also reports its ``rel_err`` against SDPA flash, and
on GPUs with a second path (sm_90a: fa3 by default) our FA2 path forced
(``AOTKERNELS_ATTENTION_PATH=fa2``) in the same run: ``fa2_TFLOPS`` and ``vs_fa2``."""

from __future__ import annotations

import argparse
import itertools
import os
from collections.abc import Callable
from typing import Any

from . import reference
from .common import FLOAT_DTYPES, Row, check, dtypes
from .timing import cuda_torch, median_ms, probe

TABLES = ("forward", "decode", "varlen")  # what --only may name
TITLES = (
    "attention forward TFLOP/s vs SDPA flash / cuDNN",
    "attention decode KV-cache TB/s vs SDPA and copy",
    "attention_varlen (useful FLOPs) vs SDPA flash on the padded batch",
)
DTYPES = ("bf16", "f16")
TOKENS = 16384  # tokens per batch: B = 16384 / N, as the FlashAttention papers
HIDDEN = 2048  # H = 2048 / D
DECODE = ((1, 1024), (1, 16384), (1, 131072), (8, 8192), (8, 131072), (64, 1024), (64, 8192),
          (64, 32768))  # fmt: skip  # (batch, context)
VARLEN = (97, 4001, 512, 1500, 33, 2048, 777, 3000, 256, 1024, 64, 2500, 128, 3500, 900, 1)


def _anchors() -> dict[str, Any]:
    """torch SDPA pinned to one backend each: flash (FlashAttention-2) and cuDNN."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return {"flash": (sdpa_kernel, SDPBackend.FLASH_ATTENTION),
            "cudnn": (sdpa_kernel, SDPBackend.CUDNN_ATTENTION)}  # fmt: skip


def _sdpa(torch: Any, backend: Any, q: Any, k: Any, v: Any, causal: bool) -> Callable[[int], Any]:
    ctx, which = backend
    F = torch.nn.functional
    # SDPA takes [B, H, S, D]: the transposed views of our [B, S, H, D] inputs.
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def run(i: int) -> Any:
        with ctx(which):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)

    return run


def compare(ours: Callable[[int], Any], q: Any, k: Any, v: Any, causal: bool) -> str:
    """Our result ([B, Sq, H, D]) against the fp32 reference."""
    return reference.close(ours(0), reference.attention(q, k, v, causal)[0], "attention")


def forward_row(
    torch: Any, ak: Any, dtype: str, d: int, n: int, causal: bool, reps: int, checked: bool
) -> Row:
    dt = getattr(torch, FLOAT_DTYPES[dtype])
    b, h = max(1, TOKENS // n), HIDDEN // d
    q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=dt) for _ in range(3))
    flops = 4 * b * h * n * n * d / (2 if causal else 1)

    def ours(i: int) -> Any:
        return ak.attention(q, k, v, causal=causal)

    row: Row = {"dtype": dtype, "D": d, "N": n, "B": b, "H": h, "causal": causal,
                "check": check(compare, ours, q, k, v, causal) if checked else None}  # fmt: skip
    mine, why = probe(ours)
    notes = [f"ours failed: {why}"] if why else []
    t_ours = None if why else median_ms(ours, reps, rounds=2)
    row["ours_TFLOPS"] = flops / t_ours / 1e9 if t_ours else None
    t_fa2 = _forced_fa2(ours, reps) if t_ours else None
    row["fa2_TFLOPS"] = flops / t_fa2 / 1e9 if t_fa2 else None
    row["vs_fa2"] = t_fa2 / t_ours if t_fa2 and t_ours else None
    for name, backend in _anchors().items():
        fn = _sdpa(torch, backend, q, k, v, causal)
        ref, why_a = probe(fn)
        if why_a:
            notes.append(f"no {name}: {why_a}")
            row[f"{name}_TFLOPS"] = row[f"vs_{name}"] = None
            continue
        if name == "flash" and mine is not None:
            row["rel_err"] = reference.rel_err(mine, ref)
        t = median_ms(fn, reps, rounds=2)
        row[f"{name}_TFLOPS"] = flops / t / 1e9
        row[f"vs_{name}"] = t / t_ours if t_ours else None
    row.setdefault("rel_err", None)
    row["note"] = "; ".join(notes)
    return row


def _forced_fa2(ours: Callable[[int], Any], reps: int) -> float | None:
    """Our time with the FA2 path forced (the op's cache keys on the variable)."""
    from ..ops.attention import ENV

    old = os.environ.get(ENV)
    os.environ[ENV] = "fa2"
    try:
        _, why = probe(ours)
        return None if why else median_ms(ours, reps, rounds=2)
    finally:
        if old is None:
            del os.environ[ENV]
        else:
            os.environ[ENV] = old


def decode_row(
    torch: Any, ak: Any, b: int, ctx: int, page: int | None, reps: int, checked: bool
) -> Row:
    """One decode step (Sq = 1, H = 32, Hkv = 8, D = 128, bf16) over a full cache of ``ctx``."""
    h, hkv, d = 32, 8, 128
    dt = torch.bfloat16
    q = torch.randn(b, 1, h, d, device="cuda", dtype=dt)
    k, v = (torch.randn(b, ctx, hkv, d, device="cuda", dtype=dt) for _ in range(2))
    lens = torch.full((b,), ctx, device="cuda", dtype=torch.int32)
    if page is None:
        kc, vc, bt = k, v, None
    else:  # the same cache as pages in a shuffled order
        per = ctx // page
        perm = torch.randperm(b * per, device="cuda")
        kc = torch.empty(b * per, page, hkv, d, device="cuda", dtype=dt)
        vc = torch.empty_like(kc)
        kc[perm] = k.reshape(b * per, page, hkv, d)
        vc[perm] = v.reshape(b * per, page, hkv, d)
        bt = perm.reshape(b, per).to(torch.int32)
    nbytes = 2 * k.numel() * k.element_size()

    def ours(i: int) -> Any:
        return ak.attention_decode(q, kc, vc, lens, bt)

    def sdpa(i: int) -> Any:
        F = torch.nn.functional
        return F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True
        )

    ok = check(compare, ours, q, k, v, False) if checked else None
    flat = k.reshape(-1)
    dst = torch.empty_like(flat)
    t_copy = median_ms(lambda i: dst.copy_(flat), reps)
    mine, why = probe(ours)
    ref, why_a = probe(sdpa)
    t_ours = None if why else median_ms(ours, reps, rounds=2)
    t_sdpa = None if why_a else median_ms(sdpa, reps)
    notes = [f"ours failed: {why}"] if why else []
    notes += [f"no sdpa: {why_a}"] if why_a else []
    rel = (
        reference.rel_err(mine, ref.transpose(1, 2))
        if mine is not None and ref is not None
        else None
    )
    copy_bw = 2 * flat.numel() * flat.element_size() / t_copy / 1e9
    ours_bw = nbytes / t_ours / 1e9 if t_ours else None
    return {
        "B": b, "context": ctx, "paged": page or 0, "check": ok,
        "ours_TBps": ours_bw, "sdpa_TBps": nbytes / t_sdpa / 1e9 if t_sdpa else None,
        "copy_TBps": copy_bw, "vs_sdpa": t_sdpa / t_ours if t_sdpa and t_ours else None,
        "of_copy": ours_bw / copy_bw if ours_bw else None,
        "rel_err": rel,
        "ours_us": t_ours * 1e3 if t_ours else None, "note": "; ".join(notes),
    }  # fmt: skip


def compare_varlen(
    ours: Callable[[int], Any], q: Any, k: Any, v: Any, cu: list[int], causal: bool
) -> str:
    """Each packed sequence of our result against the fp32 reference of that sequence alone."""
    got = ours(0)
    whys = []
    for i, (s, e) in enumerate(itertools.pairwise(cu)):
        want = reference.attention(q[None, s:e], k[None, s:e], v[None, s:e], causal)[0]
        if why := reference.close(got[None, s:e], want, "attention"):
            whys.append(f"sequence {i}: {why}")
    return "; ".join(whys)


def varlen_row(torch: Any, ak: Any, causal: bool, reps: int) -> Row:
    """A mixed batch (lengths 97 .. 4001, 16 sequences, H 16, D 128, bf16) packed for ours,
    padded to the longest for SDPA's flash backend (what a framework without varlen does)."""
    h, d, dt = 16, 128, torch.bfloat16
    total, longest = sum(VARLEN), max(VARLEN)
    q, k, v = (torch.randn(total, h, d, device="cuda", dtype=dt) for _ in range(3))
    starts = [0, *torch.tensor(VARLEN).cumsum(0).tolist()]
    cu = torch.tensor(starts, device="cuda", dtype=torch.int32)
    pad = torch.zeros(len(VARLEN), longest, h, d, device="cuda", dtype=dt)
    for i, n in enumerate(VARLEN):
        pad[i, :n] = q[starts[i] : starts[i] + n]
    flops = sum(4 * n * n * h * d for n in VARLEN) / (2 if causal else 1)

    def ours(i: int) -> Any:
        return ak.attention_varlen(q, k, v, cu, cu, longest, longest, causal=causal)

    ok = check(compare_varlen, ours, q, k, v, starts, causal)
    flash = _sdpa(torch, _anchors()["flash"], pad, pad, pad, causal)
    _, why = probe(ours)
    _, why_a = probe(flash)
    t_ours = None if why else median_ms(ours, reps)
    t_pad = None if why_a else median_ms(flash, reps)
    return {
        "causal": causal, "tokens": total, "longest": longest, "check": ok,
        "ours_TFLOPS": flops / t_ours / 1e9 if t_ours else None,
        "padded_flash_TFLOPS": flops / t_pad / 1e9 if t_pad else None,
        "vs_padded_flash": t_pad / t_ours if t_pad and t_ours else None,
        "note": "; ".join(w for w in (why, why_a) if w),
    }  # fmt: skip


def run(args: argparse.Namespace) -> tuple[list[Row], list[Row], list[Row]]:
    """Forward TFLOP/s vs SDPA flash and cuDNN; decode KV bytes/s vs SDPA and copy; a varlen
    batch vs padded SDPA flash."""
    torch = cuda_torch()
    import aotkernels as ak

    reps = min(args.reps, 20)
    tables = set(args.only.split(",")) if args.only else set(TABLES)
    seqs = (1024, 4096, 16384) if args.quick else (512, 1024, 2048, 4096, 8192, 16384)
    fwd = []
    for dtype in dtypes(args, DTYPES, ("bf16",)) if "forward" in tables else ():
        for d in (64, 128, 256):
            for n in seqs:
                for causal in (False, True):
                    fwd.append(forward_row(torch, ak, dtype, d, n, causal, reps, n == seqs[0]))
                    torch.cuda.empty_cache()
    dec = []
    for b, ctx in DECODE if "decode" in tables else ():
        for page in (None, 64):
            dec.append(decode_row(torch, ak, b, ctx, page, reps, (b, ctx) == DECODE[0]))
            torch.cuda.empty_cache()
    var = [varlen_row(torch, ak, c, reps) for c in (False, True)] if "varlen" in tables else []
    return fwd, dec, var
