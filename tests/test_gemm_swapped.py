"""The swapped small-M wgmma tile (sm_90a; the variant whose ``swap_ab`` is set in
arch_matrix.toml): the kernel computes d^T = b^T a^T, so N runs along wgmma's M and the few rows
of a along its N, and the epilogue writes d transposed.

CPU: where the tile table takes it (M up to its bm, one matrix, a K-major, no block scales) and
how the launch is packed. GPU: the variant forced on every dtype, both 16-bit b layouts, each
scale mode it takes, bias and output dtype, M on both sides of its 32-row tile, N not a multiple
of its 64 columns, and split-K (bitwise repeatable, exact on integers), all against exact or
fp64 references.
"""

from __future__ import annotations

import math
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
from helpers.reference import assert_gemm_near, rounded_once, scaled_mm_ref

# Every swapped variant of arch_matrix.toml.
SWAPPED = ("wg_16x64t", "wg_16x128t", "wg_32x64t", "wg_32x128t")

# --- CPU: the table and the launch ----------------------------------------------------------------


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> FakeGpu:
    return FakeGpu(monkeypatch)


@pytest.mark.parametrize(
    ("m", "n", "batch", "block", "a_kmajor", "want"),
    [
        (1, 4096, 1, False, True, "wg_16x64t"),
        (16, 4096, 1, False, True, "wg_16x64t"),
        (17, 4096, 1, False, True, "wg_32x64t"),
        (32, 8192, 1, False, True, "wg_32x64t"),  # 128 tiles of 64 columns: one wave
        (16, 8448, 1, False, True, "wg_16x64t"),  # 132 tiles
        (16, 8449, 1, False, True, "wg_16x128t"),  # 133: two consumers, 128 columns a tile
        (16, 14336, 1, False, True, "wg_16x128t"),
        (32, 14336, 1, False, True, "wg_32x128t"),
        (33, 4096, 1, False, True, "wg_64x128"),  # past the swapped tiles: the unswapped one
        (16, 4096, 2, False, True, "wg_64x128"),  # batches stay unswapped
        (16, 4096, 1, True, True, "wg_64x128"),  # block scales stay unswapped
        (16, 4096, 1, False, False, "wg_64x128"),  # an M-major a has no swapped entry
    ],
)
def test_table_takes_swapped_tile(
    m: int, n: int, batch: int, block: bool, a_kmajor: bool, want: str
) -> None:
    assert gemm._wgmma_tile(m, n, batch, 132, block, a_kmajor) == want


def test_swapped_variants_declared(fake_gpu: FakeGpu) -> None:
    variants = fake_gpu.family.variants
    assert {name for name, v in variants.items() if v.get("swap_ab")} == set(SWAPPED)
    for rows, narrow, wide in gemm._SWAP_TILES:
        for name, cols in ((narrow, 64), (wide, 128)):
            assert (variants[name]["bm"], variants[name]["bn"]) == (rows, cols)


@pytest.mark.parametrize(
    ("dtype", "m", "layout", "scales", "want"),
    [
        ("bf16", 16, "kk", "none", (1, 0)),  # swapped: never split
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
    ("dtype", "layout", "symbol"),
    [
        ("bfloat16", "kk", "ak_matmul_bf16_wg_16x64t_kk"),
        ("bfloat16", "kn", "ak_matmul_bf16_wg_16x64t_kn"),
        ("float16", "kn", "ak_matmul_f16_wg_16x64t_kn"),
        ("bfloat16", "mk", "ak_matmul_bf16_wg_64x128_mk"),
    ],
)
def test_swapped_launch(fake_gpu: FakeGpu, dtype: str, layout: str, symbol: str) -> None:
    """16 x 1000 x 4096: ceil(1000 / 64) = 16 CTAs of the swapped tile, no TMA-store epilogue
    (d is written transposed from shared memory)."""
    ak.matmul(*ab(16, 1000, 4096, dtype, layout))
    launch = fake_gpu.last
    assert launch.symbol == symbol
    if "x64t_" in symbol:
        assert launch.grid == (16, 1, 1)
        assert not launch.fields["flags"] & 16  # tma_store
        assert len(launch.tmaps) == 2


@pytest.mark.parametrize(
    ("dtype", "symbol"),
    [
        ("float8_e4m3fn", "ak_scaled_mm_fp8_e4m3_wg_32x64t_kk"),
        ("float8_e5m2", "ak_scaled_mm_fp8_e5m2_wg_32x64t_kk"),
        ("int8", "ak_scaled_mm_int8_wg_32x64t_kk"),
    ],
)
def test_swapped_launch_8bit(fake_gpu: FakeGpu, dtype: str, symbol: str) -> None:
    out = "int32" if dtype == "int8" else "bfloat16"
    ak.scaled_mm(*ab(32, 4096, 4096, dtype, "kk"), out_dtype=out)
    assert fake_gpu.last.symbol == symbol and fake_gpu.last.grid == (64, 1, 1)


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
        m: int, n: int, batch: int, sms: int, block: bool, a_kmajor: bool = True, *rest: Any
    ) -> str:
        if batch == 1 and not block and a_kmajor:
            return str(variant)
        return table(m, n, batch, sms, block, a_kmajor, *rest)

    def spy(*args: Any, **kwargs: Any) -> Any:
        got = pick(*args, **kwargs)
        picks.append(got)
        return got

    monkeypatch.setattr(gemm, "_wgmma_tile", tile)
    monkeypatch.setattr(gemm, "_pick", spy)
    monkeypatch.setattr(_op, "_PLANS", {})
    monkeypatch.setenv(ENV, "wgmma")
    return Forced(variant, picks)


def force_splits(monkeypatch: pytest.MonkeyPatch, splits: int) -> None:
    """Split-K into ``splits`` K ranges of whole 128-element blocks, whatever the shape."""

    def split_k(dtype: str, m: int, n: int, k: int, batch: tuple[int, ...], *_: Any) -> Any:
        blocks = math.ceil(k / 128)
        per = math.ceil(blocks / splits)
        return gemm._Split(math.ceil(blocks / per), per * 128)

    monkeypatch.setattr(gemm, "_split_k", split_k)


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


SPLIT_SHAPES = [(16, 4096, 14336), (7, 1000, 1000), (33, 130, 1500)]


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), SPLIT_SHAPES)
@pytest.mark.parametrize("splits", [2, 3])
@pytest.mark.parametrize("layout", ["kk", "kn"])
def test_swapped_split_k(
    swapped: Forced, monkeypatch: pytest.MonkeyPatch, m: int, n: int, k: int, splits: int,
    layout: str,
) -> None:  # fmt: skip
    """Split-K on the swapped tile: small integers with a bias exact in f32 and bf16, random
    operands bitwise repeatable and within the f32 accumulation bound of fp64."""
    import torch

    need_sm90a()
    force_splits(monkeypatch, splits)
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
    for _ in range(2):
        assert torch.equal(first, ak.matmul(ra, rb, torch.float32))
    ref = rav.double() @ rbv.double()
    bound = 2**-23 * ref.abs() + k * 2**-24 * (rav.double().abs() @ rbv.double().abs())
    assert ((first.double() - ref).abs() <= bound).all()
    assert swapped.last == swapped.variant


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["tensor", "vector"])
def test_swapped_split_k_fp8(swapped: Forced, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """fp8 e4m3 through 2 splits of the swapped tile, scales and a bias: repeatable bits within
    the fp8 bound."""
    import torch

    need_sm90a()
    force_splits(monkeypatch, 2)
    m, n, k = 7, 1000, 2000
    gen = generator(m, n, k, 25)
    av = torch.randn(m, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    bv = torch.randn(n, k, device="cuda", generator=gen).to(torch.float8_e4m3fn).t()
    if mode == "tensor":
        sa, sb = torch.full((1,), 0.5, device="cuda"), torch.full((1,), 2.0, device="cuda")
    else:
        sa = torch.rand(m, 1, device="cuda", generator=gen) + 0.5
        sb = torch.rand(1, n, device="cuda", generator=gen) + 0.5
    bias = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
    a, b = place(av, False, "tma"), place(bv, True, "tma")
    ys = [ak.scaled_mm(a, b, sa, sb, torch.bfloat16, bias) for _ in range(2)]
    assert torch.equal(ys[0], ys[1])
    ref = scaled_mm_ref(av, bv, sa, sb, bias)
    mag = scaled_mm_ref(av.float().abs(), bv.float().abs(), sa, sb)
    worst = ((ys[0].double() - ref).abs() - 2**-7 * ref.abs() - 2**-9 * mag).max().item()
    assert worst <= 0, f"error exceeds the bound by {worst:g}"
    assert swapped.last == swapped.variant
