"""The swapped small-M wgmma tile (sm_90a; the variant whose ``swap_ab`` is set in
arch_matrix.toml): the kernel computes d^T = b^T a^T, so N runs along wgmma's M and the few rows
of a along its N, and the epilogue writes d transposed.

The K-split forms (``ksplit`` set): a cluster of CTAs runs each tile, each CTA a share of K, and
the leader adds the others' accumulators from distributed shared memory in rank order.

CPU: where the tile table takes them (M up to its bm, one matrix, a K-major, no block scales; K
split where the unsplit grid fills at most a quarter of the SMs, or half of them with a long K) and
how the launch is packed. GPU: each variant forced on every dtype (mixed fp8 too), both 16-bit b
layouts, each scale mode it takes, bias and output dtype, M on both sides of its 32-row tile, N not
a multiple of its 64 columns, K shorter than the split and not a multiple of it, against exact or
fp64 references; the K-split forms bitwise repeatable, with more tiles than clusters (the receive
area reused).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

import aotkernels as ak
from aotkernels import loader
from aotkernels.ops import _op, gemm
from helpers.gemm import (
    ENV,
    FakeGpu,
    ab,
    generator,
    int_operands,
    need_sm90a,
    place,
    poisoned,
    pow2,
    small_ints,
    torch_dtype,
)
from helpers.reference import assert_gemm_near, f32_sum_bound, rounded_once, scaled_mm_ref

# Every swapped variant of arch_matrix.toml, and those whose cluster splits K.
KSPLIT = ("wg_16x64tk2", "wg_32x64tk2")
SWAPPED = ("wg_16x64t", "wg_16x128t", "wg_32x64t", "wg_32x128t", *KSPLIT)

# --- CPU: the table and the launch ----------------------------------------------------------------


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> FakeGpu:
    return FakeGpu(monkeypatch)


@pytest.mark.parametrize(
    ("m", "n", "k", "item", "batch", "block", "a_kmajor", "want"),
    [
        (1, 4096, 4096, 2, 1, False, True, "wg_16x64t"),
        (16, 4096, 4096, 2, 1, False, True, "wg_16x64t"),  # 64 tiles, 64 stages: not split
        (16, 4096, 6144, 2, 1, False, True, "wg_16x64tk2"),  # 96 stages: K split, 128 CTAs
        (16, 4096, 6080, 2, 1, False, True, "wg_16x64t"),  # 95 stages
        (16, 4096, 12288, 1, 1, False, True, "wg_16x64tk2"),  # 8-bit: 96 stages
        (16, 4096, 12160, 1, 1, False, True, "wg_16x64t"),
        (32, 4224, 14336, 1, 1, False, True, "wg_32x64tk2"),  # 66 tiles: 132 CTAs
        (32, 4225, 14336, 1, 1, False, True, "wg_32x64t"),  # 67 tiles: not one wave split
        (17, 4096, 4096, 2, 1, False, True, "wg_32x64t"),
        (1, 1024, 64, 2, 1, False, True, "wg_16x64tk2"),  # 16 tiles: K split, 32 CTAs
        (16, 2112, 64, 2, 1, False, True, "wg_16x64tk2"),  # 33 tiles: 66 CTAs, any K
        (32, 2112, 64, 2, 1, False, True, "wg_32x64tk2"),
        (16, 2113, 64, 2, 1, False, True, "wg_16x64t"),  # 34 tiles: more than a quarter of SMs
        (32, 8192, 14336, 2, 1, False, True, "wg_32x64t"),  # 128 tiles of 64 columns: one wave
        (16, 8448, 4096, 2, 1, False, True, "wg_16x64t"),  # 132 tiles
        (16, 8449, 4096, 2, 1, False, True, "wg_16x128t"),  # 133: two consumers, 128 columns
        (16, 14336, 4096, 2, 1, False, True, "wg_16x128t"),
        (32, 14336, 4096, 2, 1, False, True, "wg_32x128t"),
        (33, 4096, 4096, 2, 1, False, True, "wg_64x128"),  # past the swapped tiles: unswapped
        (16, 4096, 14336, 2, 2, False, True, "wg_64x128"),  # batches stay unswapped
        (16, 4096, 14336, 1, 1, True, True, "wg_64x128"),  # block scales stay unswapped
        (16, 4096, 14336, 2, 1, False, False, "wg_64x128"),  # an M-major a has no swapped entry
    ],
)
def test_table_takes_swapped_tile(
    m: int, n: int, k: int, item: int, batch: int, block: bool, a_kmajor: bool, want: str
) -> None:
    assert gemm._wgmma_tile(m, n, batch, 132, block, a_kmajor, item, k=k) == want


def test_swapped_variants_declared(fake_gpu: FakeGpu) -> None:
    variants = fake_gpu.family.variants
    assert {name for name, v in variants.items() if v.get("swap_ab")} == set(SWAPPED)
    split = {name for name, v in variants.items() if v.get("ksplit", 1) > 1 and v.get("swap_ab")}
    assert split == set(KSPLIT)
    for rows, narrow, wide, split in gemm._SWAP_TILES:
        for name, cols in ((narrow, 64), (wide, 128), (split, 64)):
            assert (variants[name]["bm"], variants[name]["bn"]) == (rows, cols)
        assert variants[split]["ksplit"] == variants[split]["cluster"] == 2


@pytest.mark.parametrize(
    ("dtype", "m", "layout", "scales", "want"),
    [
        ("bf16", 16, "kk", "none", (1, 0)),  # swapped: no workspace split (K split in a cluster)
        ("bf16", 32, "kn", "none", (1, 0)),
        ("bf16", 16, "mk", "none", (2, 7168)),  # wg_64x128: the split rule
        ("bf16", 33, "kk", "none", (2, 7168)),
        ("fp8_e4m3", 16, "kk", "tensor", (1, 0)),
        ("fp8_e4m3", 16, "kk", "block", (2, 7168)),  # block scales stay unswapped
    ],
)
def test_swapped_tiles_do_not_split(
    dtype: str, m: int, layout: str, scales: str, want: tuple[int, int]
) -> None:
    """The call's split (what the workspace is sized by) follows the tile it takes: N = 4096,
    K = 14336."""
    n, k = 4096, 14336
    la = gemm._Operand(k if layout[0] == "k" else m, layout[0])
    mode = loader.constants("gemm")["scale_mode"][f"scale_{scales}"]
    sc = gemm._Scales(mode, mode, None, None, (0, 0), (0, 0))
    p = gemm._Problem(la, la, m, n, k, "bf16", sc, None, (), dtype)
    assert tuple(gemm._problem_split(p)) == want


@pytest.mark.parametrize(
    ("dtype", "layout", "n", "symbol", "grid"),
    [
        ("bfloat16", "kk", 1000, "ak_matmul_bf16_wg_16x64tk2_kk", 32),
        ("bfloat16", "kn", 1000, "ak_matmul_bf16_wg_16x64tk2_kn", 32),
        ("float16", "kn", 1000, "ak_matmul_f16_wg_16x64tk2_kn", 32),
        ("bfloat16", "kk", 5000, "ak_matmul_bf16_wg_16x64t_kk", 79),
        ("bfloat16", "mk", 1000, "ak_matmul_bf16_wg_64x128_mk", None),
    ],
)
def test_swapped_launch(
    fake_gpu: FakeGpu, dtype: str, layout: str, n: int, symbol: str, grid: int | None
) -> None:
    """16 x N x 4096: ceil(N / 64) swapped tiles, each run by a 2-CTA cluster where one CTA a tile
    would fill at most a quarter of the SMs (N = 1000: 16 tiles, 32 CTAs; N = 5000: 79 tiles, one
    CTA each); no
    TMA-store epilogue (d is written transposed from shared memory), no workspace; a K-split
    cluster's CTAs each load whole tiles (the box of b's map is the tile's 64 rows of N)."""
    ak.matmul(*ab(16, n, 4096, dtype, layout))
    launch = fake_gpu.last
    assert launch.symbol == symbol
    if grid is not None:
        assert launch.grid == (grid, 1, 1)
        assert not launch.fields["flags"] & 16  # tma_store
        assert launch.fields["splits"] == 1 and len(fake_gpu.launches) == 1
        assert len(launch.tmaps) == 2
        assert launch.tmaps[1][13:15] == (64, 64)  # b: 64 elements of K x 64 rows of N


@pytest.mark.parametrize(
    ("dtype", "n", "symbol", "grid"),
    [
        ("float8_e4m3fn", 2048, "ak_scaled_mm_fp8_e4m3_wg_32x64tk2_kk", 64),
        ("float8_e5m2", 2048, "ak_scaled_mm_fp8_e5m2_wg_32x64tk2_kk", 64),
        ("int8", 2048, "ak_scaled_mm_int8_wg_32x64tk2_kk", 64),
        ("int8", 4096, "ak_scaled_mm_int8_wg_32x64t_kk", 64),
    ],
)
def test_swapped_launch_8bit(fake_gpu: FakeGpu, dtype: str, n: int, symbol: str, grid: int) -> None:
    out = "int32" if dtype == "int8" else "bfloat16"
    ak.scaled_mm(*ab(32, n, 4096, dtype, "kk"), out_dtype=out)
    assert fake_gpu.last.symbol == symbol and fake_gpu.last.grid == (grid, 1, 1)


# --- GPU ------------------------------------------------------------------------------------------


class Forced(NamedTuple):
    variant: str
    picks: list[Any]

    @property
    def last(self) -> str:
        return str(self.picks[-1].variant)


@pytest.fixture(params=SWAPPED)
def swapped(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Forced:
    """One swapped tile forced wherever it may run (block scales and M-major a keep the table's
    tile), on the wgmma path; records the picks made."""
    table, pick = gemm._wgmma_tile, gemm._pick
    picks: list[Any] = []
    variant = request.param

    def tile(
        m: int, n: int, batch: int, sms: int, block: bool, a_kmajor: bool = True, *rest: Any,
        **kwargs: Any,
    ) -> str:  # fmt: skip
        if batch == 1 and not block and a_kmajor:
            return str(variant)
        return table(m, n, batch, sms, block, a_kmajor, *rest, **kwargs)

    def spy(*args: Any, **kwargs: Any) -> Any:
        got = pick(*args, **kwargs)
        picks.append(got)
        return got

    monkeypatch.setattr(gemm, "_wgmma_tile", tile)
    monkeypatch.setattr(gemm, "_pick", spy)
    monkeypatch.setattr(_op, "_PLANS", {})
    monkeypatch.setenv(ENV, "wgmma")
    return Forced(variant, picks)


SHAPES = [(1, 8, 64), (7, 130, 200), (16, 1000, 4096), (33, 257, 300), (64, 128, 136)]


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
@pytest.mark.parametrize("layout", ["kk", "kn"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("out", ["float16", "bfloat16", "float32"])
def test_swapped_matmul_exact(
    swapped: Forced, m: int, n: int, k: int, layout: str, dtype: str, out: str
) -> None:
    """Small integers: exact (rounded once to the output), with and without a bias, into a
    poisoned row-strided out= whose padding stays untouched."""
    import torch

    need_sm90a()
    gen = generator(m, n, k, 21)
    a, b, av, bv = int_operands(m, n, k, dtype, layout, "tma", gen)
    bias = small_ints((n,), "float32", gen, -50, 50).to(torch_dtype(out))
    for with_bias in (False, True):
        base = poisoned((m, n + 8), torch_dtype(out))
        y = ak.matmul(a, b, out, bias=bias if with_bias else None, out=base[:, :n])
        ref = scaled_mm_ref(av, bv, None, None, bias if with_bias else None)
        assert torch.equal(y, rounded_once(ref, torch_dtype(out)))
        assert base[:, n:].isnan().all()
    assert swapped.last == swapped.variant


# (operand dtypes "<a>[/<b>]", scale kind, out dtype): int8 without scales gives int32 only.
SCALED_CASES = [
    (dtype, kind, out)
    for dtype in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fn/float8_e5m2", "int8")
    for kind in ("none", "tensor", "vector")
    for out in ("float16", "bfloat16", "float32")
    if not (dtype == "int8" and kind == "none")
] + [("int8", "none", "int32")]


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
@pytest.mark.parametrize(("dtype", "kind", "out"), SCALED_CASES)
def test_swapped_scaled_mm_exact(
    swapped: Forced, m: int, n: int, k: int, dtype: str, kind: str, out: str
) -> None:
    """fp8 (mixed operands too) and int8, a row-major and b column-major, per-tensor and
    per-row / per-column power-of-two scales with a bias: exact."""
    import torch

    need_sm90a()
    da, _, db = dtype.partition("/")
    db = db or da
    gen = generator(m, n, k, 22)
    a, _, av, _ = int_operands(m, n, k, da, "kk", "tma", gen)
    _, b, _, bv = int_operands(m, n, k, db, "kk", "tma", gen)
    sa = sb = bias = None
    if kind == "tensor":
        sa, sb = pow2((1,), gen), pow2((1,), gen)
    elif kind == "vector":
        sa, sb = pow2((m, 1), gen), pow2((n,), gen)
    if kind != "none":
        bias = small_ints((n,), "float32", gen, -50, 50).to(torch_dtype(out))
    y = ak.scaled_mm(a, b, sa, sb, out, bias)
    assert torch.equal(y, rounded_once(scaled_mm_ref(av, bv, sa, sb, bias), torch_dtype(out)))
    assert swapped.last == swapped.variant


@pytest.mark.gpu
@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize(("m", "n", "k"), [(16, 1000, 4097), (33, 257, 300)])
def test_swapped_fp8_random(swapped: Forced, m: int, n: int, k: int, fast: bool) -> None:
    """Random e4m3 with per-row / per-column scales, both accumulation modes: within the fp8
    bound of the fp64 reference."""
    import torch

    need_sm90a()
    gen = generator(m, n, k, 23)
    av = (torch.randn(m, k, device="cuda", generator=gen) * 4).to(torch.float8_e4m3fn)
    bv = (torch.randn(n, k, device="cuda", generator=gen) * 4).to(torch.float8_e4m3fn).t()
    sa = torch.rand(m, 1, device="cuda", generator=gen) + 0.5
    sb = torch.rand(n, device="cuda", generator=gen) + 0.5
    a, b = place(av, False, "tma"), place(bv, True, "tma")  # rows 16-byte aligned at any K
    y = ak.scaled_mm(a, b, sa, sb, "float32", use_fast_accum=fast)
    absref = scaled_mm_ref(av.float().abs(), bv.float().abs(), sa, sb).abs()
    assert_gemm_near(y, scaled_mm_ref(av, bv, sa, sb), absref, "float8_e4m3fn")
    assert swapped.last == swapped.variant


# K-split clusters: K of 224 / 16 stages (2 / 1 CTA shares uneven for fp8), M past the 16-row
# tile (two tile columns), and N of 313 tiles: every cluster runs several (the leader's receive
# area handed back and refilled).
KSPLIT_SHAPES = [(16, 4096, 14336), (7, 1000, 1000), (33, 130, 1500), (16, 20000, 320)]


@pytest.mark.gpu
@pytest.mark.parametrize("swapped", KSPLIT, indirect=True)
@pytest.mark.parametrize(("m", "n", "k"), KSPLIT_SHAPES)
@pytest.mark.parametrize("layout", ["kk", "kn"])
def test_ksplit_exact_and_repeatable(swapped: Forced, m: int, n: int, k: int, layout: str) -> None:
    """The K-split clusters: small integers with a bias exact in f32 and bf16, random operands
    bitwise the same on every run and within the f32 accumulation bound of fp64."""
    import torch

    need_sm90a()
    gen = generator(m, n, k, 24)
    a, b, av, bv = int_operands(m, n, k, "bfloat16", layout, "tma", gen)
    for out in ("float32", "bfloat16"):
        bias = small_ints((n,), "float32", gen, -8, 8).to(torch_dtype(out))
        y = ak.matmul(a, b, out, bias=bias, out=poisoned((m, n), torch_dtype(out)))
        assert torch.equal(y, rounded_once(scaled_mm_ref(av, bv, None, None, bias),
                                           torch_dtype(out)))  # fmt: skip
    rav = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    rbv = torch.randn(k, n, device="cuda", generator=gen).to(torch.bfloat16)
    ra, rb = place(rav, False, "tma"), place(rbv, layout == "kk", "tma")
    first = ak.matmul(ra, rb, torch.float32)
    for _ in range(3):
        assert torch.equal(first, ak.matmul(ra, rb, torch.float32))
    ref = rav.double() @ rbv.double()
    bound = f32_sum_bound(ref, rav, rbv)
    assert ((first.double() - ref).abs() <= bound).all()
    assert swapped.last == swapped.variant


@pytest.mark.gpu
@pytest.mark.parametrize("swapped", KSPLIT, indirect=True)
@pytest.mark.parametrize("mode", ["tensor", "vector"])
@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("dtypes", ["e4m3", "e4m3/e5m2"])
def test_ksplit_fp8_repeatable(swapped: Forced, mode: str, fast: bool, dtypes: str) -> None:
    """fp8 (mixed operands too) through the K-split clusters, K = 2000 (16 stages: 8 + 8) with
    scales and a bias, both accumulation modes: repeatable bits within the fp8 bound."""
    import torch

    need_sm90a()
    m, n, k = 7, 1000, 2000
    da, _, db = dtypes.partition("/")
    ta = getattr(torch, f"float8_{da}fn" if da == "e4m3" else f"float8_{da}")
    tb = getattr(torch, f"float8_{db}fn" if db == "e4m3" else f"float8_{db}") if db else ta
    gen = generator(m, n, k, 25)
    av = torch.randn(m, k, device="cuda", generator=gen).to(ta)
    bv = torch.randn(n, k, device="cuda", generator=gen).to(tb).t()
    if mode == "tensor":
        sa, sb = torch.full((1,), 0.5, device="cuda"), torch.full((1,), 2.0, device="cuda")
    else:
        sa = torch.rand(m, 1, device="cuda", generator=gen) + 0.5
        sb = torch.rand(1, n, device="cuda", generator=gen) + 0.5
    bias = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
    a, b = place(av, False, "tma"), place(bv, True, "tma")
    ys = [ak.scaled_mm(a, b, sa, sb, torch.bfloat16, bias, use_fast_accum=fast) for _ in range(3)]
    assert torch.equal(ys[0], ys[1]) and torch.equal(ys[0], ys[2])
    ref = scaled_mm_ref(av, bv, sa, sb, bias)
    mag = scaled_mm_ref(av.float().abs(), bv.float().abs(), sa, sb)
    worst = ((ys[0].double() - ref).abs() - 2**-7 * ref.abs() - 2**-9 * mag).max().item()
    assert worst <= 0, f"error exceeds the bound by {worst:g}"
    assert swapped.last == swapped.variant
