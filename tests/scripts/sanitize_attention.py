"""Attention shapes for compute-sanitizer (memcheck, racecheck): dense (every head dim, causal,
window, softcap, GQA packing, a padded head dim), varlen with empty sequences and paged
(split-KV) decodes over 16- and 24-key pages, on small odd shapes, each checked against an fp32
torch reference. Run with PYTORCH_NO_CUDA_MEMORY_CACHING=1, so that every tensor is its own
allocation of exactly its size and a read past one is a memcheck error."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aotkernels as ak
from test_attention import reference, tol


def close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    torch.testing.assert_close(out.float(), ref, **tol(dtype))


def main() -> None:
    torch.manual_seed(0)
    dev = "cuda"
    for dt in (torch.float16, torch.bfloat16):
        for d in (64, 128, 256, 40):
            q = torch.randn(2, 37, 4, d, device=dev, dtype=dt)
            k = torch.randn(2, 53, 2, d, device=dev, dtype=dt)
            v = torch.randn(2, 53, 2, d, device=dev, dtype=dt)
            for kw in ({}, {"causal": True}, {"window": (5, 3)}, {"softcap": 10.0}):
                close(ak.attention(q, k, v, **kw), reference(q, k, v, **kw)[0], dt)
            close(ak.attention(q[:, :3], k, v), reference(q[:, :3], k, v)[0], dt)  # packed GQA
        # Causal, one sequence of two heads (and, where `plain`, the same without a mask):
        # - d 128, 300 x 300: three query tiles of 128 per head, a unit of two and one alone, so
        #   that a CTA runs two tiles in a row (fa3's deferred schedule carries a tile's last P V
        #   into the next);
        # - d 64, 400 x 450: three query tiles of 192, the last holding 16 rows, so that two of
        #   its three consumer warpgroups have no row of the sequence; without a mask it runs on
        #   the 192-row tile (fa3_d64_m192_short below 1024 keys), whose warpgroups without rows
        #   pass every key tile (skip_dark);
        # - d 64, 200 x 2100: the 192-row tile from 2048 keys, consumers passing the key tiles
        #   above their rows while the producer loads each Q a tile ahead (q_ahead);
        # - d 128, 300 x 600: masked, 512-1023 keys, Q loaded a tile ahead (fa3_d128_qahead).
        shapes = ((300, 300, 128, 0), (400, 450, 64, 1), (200, 2100, 64, 0), (300, 600, 128, 0))
        for sq, sk, d, plain in shapes:
            q = torch.randn(1, sq, 2, d, device=dev, dtype=dt)
            k, v = (torch.randn(1, sk, 2, d, device=dev, dtype=dt) for _ in range(2))
            close(ak.attention(q, k, v, causal=True), reference(q, k, v, causal=True)[0], dt)
            if plain:
                close(ak.attention(q, k, v), reference(q, k, v)[0], dt)
        lq, lk = [0, 5, 33, 1], [3, 0, 70, 1]
        cq = torch.tensor([0, 0, 5, 38, 39], device=dev, dtype=torch.int32)
        ck = torch.tensor([0, 3, 3, 73, 74], device=dev, dtype=torch.int32)
        q = torch.randn(sum(lq), 4, 64, device=dev, dtype=dt)
        k = torch.randn(sum(lk), 2, 64, device=dev, dtype=dt)
        v = torch.randn(sum(lk), 2, 64, device=dev, dtype=dt)
        out = ak.attention_varlen(q, k, v, cq, ck, max(lq), max(lk), causal=True)
        ref = reference(q[None, 5:38], k[None, 3:73], v[None, 3:73], causal=True)[0]
        close(out[5:38], ref[0], dt)
        # Paged decode, split-KV: one 3000-token sequence in scattered 16-token pages.
        n, page = 3000, 16
        kc = torch.randn(1, n, 2, 128, device=dev, dtype=dt)
        vc = torch.randn(1, n, 2, 128, device=dev, dtype=dt)
        pages = (n + page - 1) // page
        perm = torch.randperm(pages, device=dev)
        kp = torch.zeros(pages, page, 2, 128, device=dev, dtype=dt)
        vp = torch.zeros_like(kp)
        pad = pages * page - n
        kp[perm] = torch.cat([kc[0], kc.new_zeros(pad, 2, 128)]).reshape(pages, page, 2, 128)
        vp[perm] = torch.cat([vc[0], vc.new_zeros(pad, 2, 128)]).reshape(pages, page, 2, 128)
        q = torch.randn(1, 1, 16, 128, device=dev, dtype=dt)
        lens = torch.tensor([n], device=dev, dtype=torch.int32)
        out = ak.attention_decode(q, kp, vp, lens, perm[None].to(torch.int32))
        close(out, reference(q, kc, vc)[0], dt)
        # 24-key pages (a 16-key tile spans two), 100 keys in the first five of eight entries:
        # the rest point nowhere and must not be read.
        bt = torch.tensor([[3, 0, 4, 1, 2, -1, 2**30, -(2**30)]], device=dev, dtype=torch.int32)
        kp = torch.randn(5, 24, 2, 128, device=dev, dtype=dt)
        vp = torch.randn(5, 24, 2, 128, device=dev, dtype=dt)
        lens = torch.tensor([100], device=dev, dtype=torch.int32)
        out = ak.attention_decode(q, kp, vp, lens, bt)
        order = bt[0, :5].long()
        kc, vc = (x[order].reshape(1, 120, 2, 128)[:, :100] for x in (kp, vp))
        close(out, reference(q, kc, vc)[0], dt)
    torch.cuda.synchronize()
    print("SANITIZE_ATTENTION_OK")


if __name__ == "__main__":
    main()
