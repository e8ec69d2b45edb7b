"""Split-K of the GEMM family (sm_90a wgmma path): the workspace split's table, bitwise
repeatability, and split results against fp64 references and against the unsplit mma.sync path;
then the K split inside a 2-CTA cluster of unswapped tiles (the swapped ones are in
test_gemm_swapped.py).

Split-K changes the order in which f32 partial sums are added (each split sums its own K range,
then the reduction adds the splits in order 0, 1, ...), so a split result is not bit-equal to an
unsplit one in general. It must be bit-equal to itself on every run (a fixed reduction order, no
atomics), exact wherever every partial sum is exact (small integers), and within the f32
accumulation bound of the fp64 reference on random inputs:
|y - ref| <= 2**-23 |ref| + K * 2**-24 * (|a| @ |b|) for an f32 output (the unsplit path obeys the
same bound; both are checked).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

import aotkernels as ak
from aotkernels.ops import gemm
from helpers.gemm import ENV, generator, int_operands, need_sm90a, place, poisoned
from helpers.reference import assert_gemm_near, f32_sum_bound, scaled_mm_ref

# Shapes the table splits (33 <= M <= 64 for a K-major a: smaller M takes the swapped tiles,
# which do not split; few 64 x 128 tiles, K of at least 96 stages of 128 bytes), with ragged
# edges: M below 64, N not a multiple of 4 (the workspace's padding columns), K not a multiple of
# the split (a shorter last split) nor of 128 (a partial last stage).
SPLIT_SHAPES = [(48, 4096, 14336), (40, 1000, 12500), (64, 257, 16400)]
FP8_SPLIT_SHAPES = [(48, 4096, 28672), (40, 1000, 24700)]


@pytest.mark.parametrize(
    ("dtype", "m", "n", "k", "batch", "want"),
    [
        ("bf16", 16, 4096, 4096, (), (1, 0)),  # 64 stages of K: measured faster unsplit
        ("bf16", 16, 4096, 14336, (), (2, 7168)),  # 224 stages: 2 splits of at least 48
        ("bf16", 64, 4096, 14336, (), (2, 7168)),
        ("bf16", 16, 4096, 57344, (), (2, 28672)),  # 32 tiles: 2 splits fill half of 132 SMs
        ("bf16", 16, 8192, 8192, (), (1, 0)),  # 64 tiles: a split would pass half the SMs
        ("bf16", 65, 4096, 14336, (), (1, 0)),  # two tile rows: splitting measured slower
        ("bf16", 128, 4096, 4096, (), (1, 0)),
        ("fp8_e4m3", 16, 8192, 8192, (), (1, 0)),  # 64 stages of K (1-byte elements)
        ("fp8_e4m3", 16, 4096, 14336, (), (2, 7168)),  # 112 stages: 2 splits of 56
        ("fp8_e4m3", 16, 4096, 12160, (), (1, 0)),  # 95 stages
        ("fp8_e4m3", 16, 4096, 28672, (), (2, 14336)),
        ("bf16", 16, 14336, 4096, (), (1, 0)),  # 112 tiles: a wave already
        ("bf16", 16, 4096, 2048, (), (1, 0)),  # 32 stages
        ("bf16", 16, 256, 12300, (), (4, 3200)),  # 193 stages, the last K block partial
        ("int8", 32, 4096, 4096, (), (1, 0)),  # exact s32 sums: never split
        ("bf16", 16, 4096, 4096, (3,), (1, 0)),  # batches: never split
        ("bf16", 16, 4096, 14336, (1,), (2, 7168)),
        ("bf16", 0, 4096, 4096, (), (1, 0)),
        ("bf16", 1, 128, 1 << 20, (), (16, 65536)),  # at most 16 splits
    ],
)
def test_split_table(
    dtype: str, m: int, n: int, k: int, batch: tuple[int, ...], want: tuple[int, int]
) -> None:
    split = gemm._split_k(dtype, m, n, k, batch)
    assert (split.splits, split.k_split) == want
    if split.splits > 1:
        # Every split is non-empty and K-aligned to the 128-wide stage / scale block.
        assert split.k_split % 128 == 0 and (split.splits - 1) * split.k_split < k
        assert split.ws_shape(m, n) == (split.splits, m, -(-n // 4) * 4)
    else:
        assert split.ws_shape(m, n) == (0,)


# --- GPU ----------------------------------------------------------------------------------------


def _splits(dtype: str, m: int, n: int, k: int) -> int:
    return gemm._split_k(dtype, m, n, k, ()).splits


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), SPLIT_SHAPES)
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_split_bitwise_repeatable(m: int, n: int, k: int, out_dtype: str) -> None:
    """The same inputs twice give the same bits (the reduction order is fixed)."""
    import torch

    need_sm90a()
    assert _splits("bf16", m, n, k) > 1
    g = generator(m, n, k)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    w = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
    odt = getattr(torch, out_dtype)
    first = ak.matmul(a, w.t(), odt, out=poisoned((m, n), odt))
    for _ in range(3):
        again = ak.matmul(a, w.t(), odt, out=poisoned((m, n), odt))
        assert torch.equal(first, again)
    assert not first.isnan().any()


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), SPLIT_SHAPES)
def test_split_exact_on_integers(m: int, n: int, k: int) -> None:
    """Small integers: every partial sum is exact in f32, so the split result is bit-equal to
    the exact product (with a bias)."""
    import torch

    need_sm90a()
    g = generator(m, n, k, 1)
    a = torch.randint(-3, 4, (m, k), device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randint(-3, 4, (n, k), device="cuda", generator=g).to(torch.bfloat16).t()
    bias = torch.randint(-8, 9, (n,), device="cuda", generator=g).to(torch.float32)
    y = ak.matmul(a, b, torch.float32, bias=bias, out=poisoned((m, n), torch.float32))
    ref = a.double() @ b.double() + bias.double()
    assert torch.equal(y.double(), ref)


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), SPLIT_SHAPES)
@pytest.mark.parametrize("layout", ["kk", "kn", "mk", "mn"])
def test_split_vs_unsplit_reference(
    m: int, n: int, k: int, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random bf16 operands in every layout, f32 out: the split result (wgmma) and the unsplit
    one (mma.sync, forced) both within the f32 accumulation bound of the fp64 reference."""
    import torch

    need_sm90a()
    g = generator(m, n, k, 2)
    av = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    bv = torch.randn(k, n, device="cuda", generator=g).to(torch.bfloat16)
    a = av.t().contiguous().t() if layout[0] == "m" else av
    b = bv.t().contiguous().t() if layout[1] == "k" else bv
    ref = av.double() @ bv.double()
    bound = f32_sum_bound(ref, av, bv)
    monkeypatch.delenv("AOTKERNELS_GEMM_PATH", raising=False)
    split = ak.matmul(a, b, torch.float32, out=poisoned((m, n), torch.float32))
    monkeypatch.setenv("AOTKERNELS_GEMM_PATH", "mma_sync")
    unsplit = ak.matmul(a, b, torch.float32, out=poisoned((m, n), torch.float32))
    for name, y in (("split", split), ("unsplit", unsplit)):
        worst = ((y.double() - ref).abs() - bound).max().item()
        assert worst <= 0, f"{name}: error exceeds the bound by {worst:g}"
    assert not torch.equal(split, torch.zeros_like(split))


def _fp8_scales(mode: str, m: int, n: int, k: int, g: Any) -> tuple[Any, Any]:
    import torch

    if mode == "tensor":
        return torch.full((1,), 0.5, device="cuda"), torch.full((1,), 2.0, device="cuda")
    if mode == "rowcol":
        return (torch.rand(m, 1, device="cuda", generator=g) + 0.5,
                torch.rand(1, n, device="cuda", generator=g) + 0.5)  # fmt: skip
    kb, nb = math.ceil(k / 128), math.ceil(n / 128)
    return (torch.rand(kb, m, device="cuda", generator=g).t() + 0.5,
            torch.rand(nb, kb, device="cuda", generator=g) + 0.5)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["tensor", "rowcol", "block"])
@pytest.mark.parametrize(("m", "n", "k"), FP8_SPLIT_SHAPES)
def test_split_fp8_scales(m: int, n: int, k: int, mode: str) -> None:
    """fp8 e4m3 with each scale mode and a bias through a split: repeatable bits, and within
    the fp8 accumulation bound (2**-9 of the sum of |terms|, plus a bf16 ulp) of fp64."""
    import torch

    need_sm90a()
    assert _splits("fp8_e4m3", m, n, k) > 1
    g = generator(m, n, k, 3)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn).t()
    sa, sb = _fp8_scales(mode, m, n, k, g)
    bias = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16)
    ys = [
        ak.scaled_mm(a, b, sa, sb, torch.bfloat16, bias, out=poisoned((m, n), torch.bfloat16))
        for _ in range(2)
    ]
    assert torch.equal(ys[0], ys[1])
    ref = scaled_mm_ref(a, b, sa, sb, bias)
    mag = scaled_mm_ref(a.float().abs(), b.float().abs(), sa, sb)  # sum of |terms| (scales > 0)
    err = (ys[0].double() - ref).abs()
    worst = (err - 2**-7 * ref.abs() - 2**-9 * mag).max().item()
    assert worst <= 0, f"error exceeds the bound by {worst:g}"


# --- K split inside a 2-CTA cluster, unswapped (wg_128x64k2) --------------------------------------
# The cluster's two CTAs run the same 128 x 64 tile, each half of its K stages, and the leader adds
# the other's accumulators in rank order: no workspace, bitwise repeatable, not bit-equal to an
# unsplit tile in general. The table takes it at 96 < M <= 128 where 64 x 128 tiles would fill at
# most half the SMs, for one matrix without block scales and a K of at least 64 stages.
CLUSTER_SPLIT = "wg_128x64k2"


@pytest.mark.parametrize(
    ("m", "n", "k", "item", "batch", "block", "want"),
    [
        (128, 4096, 4096, 2, 1, False, CLUSTER_SPLIT),  # 64 stages: 2 x 64 tiles, 128 CTAs
        (128, 4096, 4032, 2, 1, False, "wg_64x64"),  # 63 stages
        (128, 4096, 14336, 1, 1, False, CLUSTER_SPLIT),  # 8-bit: 112 stages
        (128, 4096, 4096, 1, 1, False, "wg_64x64"),  # 8-bit: 32 stages
        (97, 1024, 4096, 2, 1, False, CLUSTER_SPLIT),
        (96, 4096, 14336, 2, 1, False, "wg_64x64"),  # at 96 rows the 64 x 64 tiles
        (128, 4096, 14336, 1, 1, True, "wg_64x64"),  # block scales: unsplit
        (128, 2048, 14336, 2, 2, False, "wg_64x64"),  # batches: unsplit
        (128, 8192, 14336, 2, 1, False, "wg_64x128"),  # 64 x 128 tiles fill more than half
        (129, 4096, 14336, 2, 1, False, "wg_64x128"),  # past 128 rows: the few-tile rule
    ],
)
def test_cluster_split_table(
    m: int, n: int, k: int, item: int, batch: int, block: bool, want: str
) -> None:
    assert gemm._wgmma_tile(m, n, batch, 132, block, True, item, k=k) == want


@pytest.fixture
def cluster_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """wg_128x64k2 forced for every call, on the wgmma path (forced too: a call that could not
    take the tile raises instead of running mma.sync)."""
    from aotkernels.ops import _op

    monkeypatch.setattr(gemm, "_wgmma_tile", lambda *args, **kwargs: CLUSTER_SPLIT)
    monkeypatch.setattr(_op, "_PLANS", {})
    monkeypatch.setenv(ENV, "wgmma")


# The table's own pick (128 x 4096 x 14336), two tile rows of 128 with the second nearly empty and
# K not a multiple of the stage, a K of 3 stages (one CTA 2, the other 1), and 313 tile columns:
# every cluster runs several tiles (the leader's receive area handed back and refilled).
CLUSTER_SPLIT_SHAPES = [(128, 4096, 14336), (130, 300, 1500), (100, 1000, 300), (97, 20000, 320)]


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), CLUSTER_SPLIT_SHAPES)
@pytest.mark.parametrize("layout", ["kk", "kn", "mk", "mn"])
def test_cluster_split_exact_and_repeatable(
    cluster_split: None, m: int, n: int, k: int, layout: str
) -> None:
    """Small integers with a bias: exact in f32 and bf16 (every partial sum is exact). Random
    operands: the same bits on every run, within the f32 accumulation bound of fp64."""
    import torch

    need_sm90a()
    g = generator(m, n, k, 4)
    a, b, av, bv = int_operands(m, n, k, "bfloat16", layout, "tma", g)
    bias = torch.randint(-8, 9, (n,), device="cuda", generator=g).to(torch.float32)
    ref = av.double() @ bv.double() + bias.double()
    for out in (torch.float32, torch.bfloat16):
        y = ak.matmul(a, b, out, bias=bias.to(out), out=poisoned((m, n), out))
        assert torch.equal(y, ref.to(out))
    rav = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    rbv = torch.randn(k, n, device="cuda", generator=g).to(torch.bfloat16)
    ra, rb = place(rav, layout[0] == "m", "tma"), place(rbv, layout[1] == "k", "tma")
    first = ak.matmul(ra, rb, torch.float32)
    for _ in range(3):
        assert torch.equal(first, ak.matmul(ra, rb, torch.float32))
    rref = rav.double() @ rbv.double()
    bound = f32_sum_bound(rref, rav, rbv)
    worst = ((first.double() - rref).abs() - bound).max().item()
    assert worst <= 0, f"error exceeds the bound by {worst:g}"


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["tensor", "rowcol"])
@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize(("m", "n", "k"), [(128, 4096, 14336), (100, 1000, 2000)])
def test_cluster_split_fp8(
    cluster_split: None, m: int, n: int, k: int, mode: str, fast: bool
) -> None:
    """fp8 e4m3 with scales and a bias, both accumulation modes: repeatable bits within the fp8
    bound of fp64."""
    import torch

    need_sm90a()
    g = generator(m, n, k, 5)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn).t()
    sa, sb = _fp8_scales(mode, m, n, k, g)
    bias = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16)
    ys = [ak.scaled_mm(a, b, sa, sb, torch.bfloat16, bias, use_fast_accum=fast) for _ in range(3)]
    assert torch.equal(ys[0], ys[1]) and torch.equal(ys[0], ys[2])
    mag = scaled_mm_ref(a.float().abs(), b.float().abs(), sa, sb)
    assert_gemm_near(ys[0], scaled_mm_ref(a, b, sa, sb, bias), mag, "float8_e4m3fn")


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), [(128, 4096, 14336), (100, 1000, 2000)])
def test_cluster_split_int8(cluster_split: None, m: int, n: int, k: int) -> None:
    """int8: bit-equal to torch._int_mm (exact s32 sums)."""
    import torch

    need_sm90a()
    g = generator(m, n, k, 6)
    a = torch.randint(-128, 128, (m, k), device="cuda", generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (n, k), device="cuda", generator=g, dtype=torch.int8).t()
    assert torch.equal(ak.scaled_mm(a, b, out_dtype=torch.int32), torch._int_mm(a, b))
