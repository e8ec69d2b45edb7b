"""Batched and biased matmul on the GPU: every batch layout (broadcast, expanded, sliced,
K-/M-major, 1 to 1000 matrices, the refused outer product) on each path, exact from small
integers against torch.matmul's fp64 result; random batches against torch.bmm; bias exact and
against F.linear / torch.addmm; batch strides past 2**31.
"""

from __future__ import annotations

from typing import Any

import pytest

import aotkernels as ak
from aotkernels.errors import NoKernelImageError
from helpers.gemm import ENV, PATHS, generator, need_sm90a, poisoned, small_ints, torch_dtype
from helpers.reference import assert_gemm_near, gemm_bound


def _batch_case(case: str, dtype: str, gen: Any) -> tuple[Any, Any]:
    """(a, b) of small integers for a named batched layout (sizes multiples of 8: TMA-legal)."""

    def ints(*shape: int) -> Any:
        return small_ints(shape, dtype, gen)

    if case == "batch1":
        return ints(1, 40, 128), ints(1, 128, 56)
    if case == "contiguous":
        return ints(7, 72, 128), ints(7, 128, 88)
    if case == "b_broadcast":  # [B, M, K] @ [K, N]: one GEMM of B * M rows
        return ints(5, 3, 24, 128), ints(128, 40)
    if case == "a_broadcast":
        return ints(24, 128), ints(5, 128, 40)
    if case == "expanded":  # stride-0 batch dims, as torch's expand() makes them
        return ints(1, 24, 128).expand(6, 24, 128), ints(6, 128, 40)
    if case == "outer_product":  # [2, 1] x [1, 3] batches: no single stride (refused)
        return ints(2, 1, 16, 128), ints(1, 3, 128, 32)
    if case == "b_kmajor":  # b as [B, N, K].mT (nn.Linear weights per batch)
        return ints(4, 32, 128), ints(4, 48, 128).mT
    if case == "a_mmajor":
        return ints(4, 128, 32).mT, ints(4, 128, 48)
    if case == "sliced":  # matrices of a strided out of a larger buffer: batch stride != M * K
        big = ints(3, 40, 136)
        return big[:, 5:37, :128], ints(3, 128, 24)
    if case == "batch1000":
        return ints(1000, 16, 64), ints(1000, 64, 64)
    assert case == "odd"  # mma.sync only: nothing 16-byte aligned
    return ints(3, 7, 127), ints(3, 127, 5)


BATCH_CASES = ["batch1", "contiguous", "b_broadcast", "a_broadcast", "expanded", "outer_product",
               "b_kmajor", "a_mmajor", "sliced", "batch1000", "odd"]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("case", BATCH_CASES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("path", [None, *PATHS])
def test_batched_matmul_exact(
    monkeypatch: pytest.MonkeyPatch, path: str | None, dtype: str, case: str
) -> None:
    """Small integers: every path equals torch.matmul's fp64 result rounded once, bit for bit,
    with torch.matmul's broadcast batch shape."""
    import torch

    if path is not None:
        monkeypatch.setenv(ENV, path)
    if path == "wgmma":
        need_sm90a()
    a, b = _batch_case(case, dtype, generator(len(case), 11))
    if case == "outer_product":  # one launch binds one pointer per operand: refused, typed
        with pytest.raises(NotImplementedError, match="must collapse into one stride each"):
            ak.matmul(a, b)
        return
    ref = torch.matmul(a.double(), b.double())
    try:
        y = ak.matmul(a, b)
    except NoKernelImageError:
        # Forced wgmma declines what TMA cannot fold: only the odd case.
        assert path == "wgmma" and case == "odd"
        return
    assert y.shape == ref.shape and y.dtype == torch_dtype(dtype)
    assert torch.equal(y, ref.float().to(torch_dtype(dtype)))
    out = poisoned((y.numel(), 1), torch_dtype(dtype)).view(y.shape)
    assert ak.matmul(a, b, out=out) is out and torch.equal(out, y)


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 1000])
def test_batched_matmul_random_vs_bmm(batch: int) -> None:
    import torch

    gen = generator(batch, 12)
    a = torch.randn(batch, 64, 128, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(batch, 128, 96, device="cuda", generator=gen).to(torch.bfloat16)
    y = ak.matmul(a, b)
    ref = torch.matmul(a.double(), b.double())
    absref = torch.matmul(a.double().abs(), b.double().abs())
    assert_gemm_near(y, ref, absref, "bfloat16")
    theirs = torch.bmm(a, b)
    bound = 2 * gemm_bound(ref, absref, "bfloat16", "bfloat16")
    assert ((y.double() - theirs.double()).abs() <= bound).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("out", ["same", "float32"])
@pytest.mark.parametrize("path", [None, *PATHS])
@pytest.mark.parametrize("shape", [(7, 33, 65), (256, 200, 128), (2, 3, 40, 128)])
def test_matmul_bias(
    monkeypatch: pytest.MonkeyPatch, path: str | None, dtype: str, out: str,
    shape: tuple[int, ...],
) -> None:  # fmt: skip
    """Small integers plus an integer bias: exact; random values against F.linear / addmm."""
    import torch
    import torch.nn.functional as F

    if path is not None:
        monkeypatch.setenv(ENV, path)
    if path == "wgmma":
        need_sm90a()
    *lead, m, n, k = shape
    odt = torch_dtype(dtype) if out == "same" else torch.float32
    gen = generator(*shape, 13)
    a, b = small_ints((*lead, m, k), dtype, gen), small_ints((k, n), dtype, gen)
    bias = small_ints((n,), "float16", gen, -8, 8).to(odt)
    try:
        y = ak.matmul(a, b, None if out == "same" else odt, bias=bias)
    except NoKernelImageError:
        assert path == "wgmma" and 65 in shape  # odd rows are not TMA-legal
        return
    ref = torch.matmul(a.double(), b.double()) + bias.double()
    assert y.dtype == odt and torch.equal(y, ref.float().to(odt))
    if not lead:
        ra = torch.randn(m, k, device="cuda", generator=gen).to(torch_dtype(dtype))
        w = torch.randn(n, k, device="cuda", generator=gen).to(torch_dtype(dtype))
        rbias = torch.randn(n, device="cuda", generator=gen).to(torch_dtype(dtype))
        mine = ak.matmul(ra, w.t(), bias=rbias)
        ref = ra.double() @ w.double().t() + rbias.double()
        absref = ra.double().abs() @ w.double().abs().t() + rbias.double().abs()
        assert_gemm_near(mine, ref, absref, dtype)
        bound = 2 * gemm_bound(ref, absref, dtype, dtype)
        for theirs in (F.linear(ra, w, rbias), torch.addmm(rbias, ra, w.t())):
            assert ((mine.double() - theirs.double()).abs() <= bound).all()


@pytest.mark.gpu
@pytest.mark.parametrize("path", PATHS)
def test_batch_strides_past_2_pow_31(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """a's and out's second matrices 2**31 elements on: 64-bit batch offsets on both paths."""
    import torch

    if path == "wgmma":
        need_sm90a()
    need = 2 * (2**31 + 2**20) * 2
    free, _ = torch.cuda.mem_get_info()
    if free < need + 2**30:
        pytest.skip(f"needs {need / 2**30:.1f} GiB of free GPU memory, {free / 2**30:.1f} free")
    monkeypatch.setenv(ENV, path)
    m, n, k = 64, 128, 128
    gen = generator(m, n, k, 15)
    abuf = torch.zeros(2**31 + m * k, dtype=torch.bfloat16, device="cuda")
    a = torch.as_strided(abuf, (2, m, k), (2**31, k, 1))
    a.copy_(small_ints((2, m, k), "bfloat16", gen))
    b = small_ints((2, k, n), "bfloat16", gen)
    obuf = torch.full((2**31 + m * n,), float("nan"), dtype=torch.bfloat16, device="cuda")
    out = torch.as_strided(obuf, (2, m, n), (2**31, n, 1))
    ak.matmul(a, b, out=out)
    ref = torch.matmul(a.double(), b.double()).float().to(torch.bfloat16)
    assert torch.equal(out, ref)
    assert bool(obuf[m * n : 2**31].isnan().all())  # nothing written between the matrices
