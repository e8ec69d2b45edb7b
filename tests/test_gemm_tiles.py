"""gemm tile choice and launch packing (CPU), on a simulated GPU (the installed manifest's gemm
family as the loader reads it, with launches recorded instead of run): the variant each shape,
layout, alignment, dtype and target gets (sm_90a, sm_80, sm_89, sm_100a, sm_120a), forced paths,
and the packed launch: the parameter block, grid, block, shared memory and TMA descriptors, for
plain, scaled, batched, biased and mixed-fp8 calls.
"""

from __future__ import annotations

from typing import Any

import pytest

import aotkernels as ak
from aotkernels.errors import NoKernelImageError
from aotkernels.ops import gemm
from helpers.fake_dlpack import FakeCudaArray
from helpers.gemm import (
    A_PTR,
    B_PTR,
    BIAS_PTR,
    D_PTR,
    ENV,
    OUT_PTR,
    SA_PTR,
    SB_PTR,
    FakeGpu,
    ab,
    f32,
    map2,
    mat,
)


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> FakeGpu:
    return FakeGpu(monkeypatch)


def _bf16(m: int, n: int, k: int, layout: str = "kn", ld_a: int | None = None,
          a_off: int = 0) -> tuple[FakeCudaArray, FakeCudaArray]:  # fmt: skip
    a = mat((m, k), col_major=layout[0] == "m", ld=ld_a, ptr=A_PTR + a_off)
    b = mat((k, n), col_major=layout[1] == "k", ptr=B_PTR)
    return a, b


@pytest.mark.parametrize(
    ("m", "n", "k", "layout", "ld_a", "a_off", "symbol", "grid"),
    [
        (4096, 4096, 4096, "kn", None, 0, "ak_matmul_bf16_wg_128x256_kn", (132, 1, 1)),
        (4096, 4096, 4096, "mk", None, 0, "ak_matmul_bf16_wg_128x256_mk", (132, 1, 1)),
        (8192, 1024, 512, "kk", None, 0, "ak_matmul_bf16_wg_128x256_kk", (132, 1, 1)),
        (64, 4096, 4096, "mn", None, 0, "ak_matmul_bf16_wg_64x128_mn", (32, 1, 1)),  # K short
        (16, 4096, 4096, "kk", None, 0, "ak_matmul_bf16_wg_16x64t_kk", (64, 1, 1)),  # swapped
        (32, 4096, 4096, "kn", None, 0, "ak_matmul_bf16_wg_32x64t_kn", (64, 1, 1)),
        (16, 4096, 14336, "kk", None, 0, "ak_matmul_bf16_wg_16x64tk2_kk", (128, 1, 1)),  # long K
        (16, 2048, 14336, "kk", None, 0, "ak_matmul_bf16_wg_16x64tk2_kk", (64, 1, 1)),  # K split
        (48, 4096, 14336, "kk", None, 0, "ak_matmul_bf16_wg_64x128_kk", (64, 1, 1)),  # 2 splits
        (128, 4096, 4032, "kn", None, 0, "ak_matmul_bf16_wg_64x64_kn", (128, 1, 1)),
        (128, 4096, 4096, "kn", None, 0, "ak_matmul_bf16_wg_128x64k2_kn", (128, 1, 1)),  # K split
        (104, 4096, 4096, "mk", None, 0, "ak_matmul_bf16_wg_128x64k2_mk", (128, 1, 1)),
        (96, 4096, 14336, "mk", None, 0, "ak_matmul_bf16_wg_64x64_mk", (128, 1, 1)),
        (128, 8192, 4096, "kn", None, 0, "ak_matmul_bf16_wg_64x128_kn", (128, 1, 1)),
        (128, 14336, 4096, "kn", None, 0, "ak_matmul_bf16_wg_128x128_kn", (112, 1, 1)),  # 1 row
        (96, 32000, 4096, "kk", None, 0, "ak_matmul_bf16_wg_128x128_kk", (132, 1, 1)),
        (1024, 14336, 4096, "kn", None, 0, "ak_matmul_bf16_wg_128x128_kn", (132, 1, 1)),  # fill
        (512, 512, 512, "kn", None, 0, "ak_matmul_bf16_wg_64x128_kn", (32, 1, 1)),  # few tiles
        (4096, 4096, 4095, "kn", None, 0, "ak_matmul_bf16_mma_128x128", (1024, 1, 1)),  # lda odd
        (4096, 4096, 4096, "kn", 4100, 0, "ak_matmul_bf16_mma_128x128", (1024, 1, 1)),  # lda%8
        (4096, 4096, 4096, "kn", None, 2, "ak_matmul_bf16_mma_128x128", (1024, 1, 1)),  # a+2 B
        (100, 100, 64, "kn", None, 2, "ak_matmul_bf16_mma_64x64", (4, 1, 1)),
        (1000, 1000, 0, "kn", None, 0, "ak_matmul_bf16_mma_64x64", (256, 1, 1)),  # K = 0
        (7, 4096, 4096, "mk", 8, 0, "ak_matmul_bf16_wg_64x128_mk", (32, 1, 1)),
    ],
)
def test_pick_sm90a(
    fake_gpu: FakeGpu, m: int, n: int, k: int, layout: str, ld_a: int | None, a_off: int,
    symbol: str, grid: tuple[int, int, int],
) -> None:  # fmt: skip
    ak.matmul(*_bf16(m, n, k, layout, ld_a, a_off))
    launch = fake_gpu.last
    assert (launch.symbol, launch.grid) == (symbol, grid)
    v = fake_gpu.family.variants[symbol.split("bf16_")[1].removesuffix(f"_{layout}")]
    assert launch.block == (v["threads"], 1, 1) and launch.smem == v["smem"]
    assert bool(launch.tmaps) == (v["path"] == "wgmma")


@pytest.mark.parametrize(
    ("dtype", "layout", "symbol"),
    [
        # fp8 two-level accumulation from 4096 rows: 128 x 128 tiles
        ("float8_e4m3fn", "kk", "ak_scaled_mm_fp8_e4m3_wg_128x128_kk"),
        ("float8_e5m2", "kk", "ak_scaled_mm_fp8_e5m2_wg_128x128_kk"),
        ("int8", "kk", "ak_scaled_mm_int8_wg_128x256_kk"),
        ("float8_e4m3fn", "kn", "ak_scaled_mm_fp8_e4m3_mma_128x128"),  # 8-bit wgmma: kk only
        ("int8", "mk", "ak_scaled_mm_int8_mma_128x128"),
        ("float8_e5m2", "mn", "ak_scaled_mm_fp8_e5m2_mma_128x128"),
    ],
)
def test_pick_sm90a_8bit(fake_gpu: FakeGpu, dtype: str, layout: str, symbol: str) -> None:
    out = "int32" if dtype == "int8" else "bfloat16"
    ak.scaled_mm(*ab(4096, 4096, 4096, dtype, layout), out_dtype=out)
    assert fake_gpu.last.symbol == symbol


@pytest.mark.parametrize(
    ("dtype", "m", "n", "k", "scales", "variant"),
    [
        ("float8_e4m3fn", 128, 4096, 4096, "tensor", "wg_64x64"),
        ("int8", 128, 4096, 14336, "none", "wg_128x64k2"),  # K split by a 2-CTA cluster
        ("int8", 128, 4096, 8064, "none", "wg_64x64"),  # 63 stages
        ("float8_e4m3fn", 128, 8192, 8192, "tensor", "wg_128x64"),  # 8-bit: 2 x 64 columns
        ("int8", 1024, 1024, 1024, "none", "wg_128x64"),
        ("float8_e4m3fn", 1024, 1024, 1024, "tensor", "wg_128x64"),
        ("float8_e4m3fn", 128, 8192, 8192, "fast", "wg_64x128"),  # fast accumulation: 1 x 128
        ("float8_e4m3fn", 1024, 1024, 1024, "fast", "wg_64x128"),
        ("float8_e5m2", 128, 14336, 4096, "tensor", "wg_128x128"),
        ("float8_e4m3fn", 128, 4096, 4096, "block", "wg_64x64"),  # block scales: as before
        ("float8_e4m3fn", 128, 14336, 4096, "block", "wg_64x128"),
        ("float8_e4m3fn", 1024, 1024, 1024, "block", "wg_64x128"),
    ],
)
def test_pick_sm90a_8bit_few_tiles(
    fake_gpu: FakeGpu, dtype: str, m: int, n: int, k: int, scales: str, variant: str
) -> None:
    """The tile table's picks for 8-bit operands where the tiles are few (M = 128, small
    squares); "fast": per-tensor scales with use_fast_accum."""
    kb, nb = -(-k // 128), -(-n // 128)
    sa = sb = None
    if scales in ("tensor", "fast"):
        sa, sb = f32((1,), SA_PTR), f32((1,), SB_PTR)
    elif scales == "block":
        sa, sb = f32((m, kb), SA_PTR), f32((nb, kb), SB_PTR)
    out = "int32" if dtype == "int8" else "bfloat16"
    ak.scaled_mm(*ab(m, n, k, dtype, "kk"), sa, sb, out_dtype=out, use_fast_accum=scales == "fast")
    assert fake_gpu.last.symbol.endswith(f"_{variant}_kk")


def test_pick_forced_paths(fake_gpu: FakeGpu, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "mma_sync")
    ak.matmul(*_bf16(4096, 4096, 4096))
    assert fake_gpu.last.symbol == "ak_matmul_bf16_mma_128x128" and not fake_gpu.last.tmaps
    ak.matmul(*_bf16(100, 100, 64))
    assert fake_gpu.last.symbol == "ak_matmul_bf16_mma_64x64"
    monkeypatch.setenv(ENV, "wgmma")
    ak.matmul(*_bf16(128, 128, 64))
    assert fake_gpu.last.symbol == "ak_matmul_bf16_wg_64x64_kn"
    n = len(fake_gpu.launches)
    for args in (_bf16(4096, 4096, 4095), _bf16(64, 64, 64, a_off=2), _bf16(64, 64, 0)):
        with pytest.raises(
            NoKernelImageError,
            match=r"matmul: AOTKERNELS_GEMM_PATH=wgmma has no bfloat16 kernel for this call "
            r"\(device 0 \(Fake GPU, cc 9.0\) runs image sm_90a; the wgmma path needs TMA-legal",
        ):
            ak.matmul(*args)
    with pytest.raises(NoKernelImageError, match=r"AOTKERNELS_GEMM_PATH=wgmma has no float8"):
        ak.scaled_mm(*ab(64, 64, 64, "float8_e4m3fn", "kn"), out_dtype="float32")
    monkeypatch.setenv(ENV, "tcgen05")
    with pytest.raises(NoKernelImageError, match=r"AOTKERNELS_GEMM_PATH=tcgen05 has no bfloat16"):
        ak.matmul(*_bf16(128, 128, 128))
    assert len(fake_gpu.launches) == n  # nothing launched for the refused calls


@pytest.mark.parametrize("value", ["cutlass", "WGMMA", "mma", "1"])
def test_rejects_invalid_forced_path(
    fake_gpu: FakeGpu, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(ENV, value)
    with pytest.raises(
        ValueError,
        match=rf"AOTKERNELS_GEMM_PATH must be one of mma_sync, wgmma, tcgen05, got '{value}'",
    ):
        ak.matmul(*_bf16(64, 64, 64))
    assert not fake_gpu.launches


def test_pick_other_targets(fake_gpu: FakeGpu, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu.use("sm_80", 108)
    ak.matmul(*_bf16(4096, 4096, 4096))
    assert fake_gpu.last.symbol == "ak_matmul_bf16_mma_128x128"
    ak.scaled_mm(*ab(64, 64, 64, "int8", "kk"), out_dtype="int32")
    assert fake_gpu.last.symbol == "ak_scaled_mm_int8_mma_64x64"
    with pytest.raises(
        NoKernelImageError,
        match=r"scaled_mm: no float8_e4m3fn GEMM kernel for device 0 \(Fake GPU, cc 8.0\) runs "
        r"image sm_80; .*fp8: sm_89\+",
    ):
        ak.scaled_mm(*ab(64, 64, 64, "float8_e4m3fn", "kk"), out_dtype="float32")
    monkeypatch.setenv(ENV, "wgmma")
    with pytest.raises(NoKernelImageError, match=r"AOTKERNELS_GEMM_PATH=wgmma"):
        ak.matmul(*_bf16(4096, 4096, 4096))
    monkeypatch.delenv(ENV)
    fake_gpu.use("sm_100a", 148)
    ak.matmul(*_bf16(4096, 4096, 4096))  # tcgen05 is opt-in, and sm_100a has no wgmma
    assert fake_gpu.last.symbol == "ak_matmul_bf16_mma_128x128"
    monkeypatch.setenv("AOTKERNELS_GEMM_TCGEN05", "1")
    ak.matmul(*_bf16(4096, 4096, 4096, "mn"))
    assert fake_gpu.last.symbol == "ak_matmul_bf16_tc_128x256_mn"
    assert fake_gpu.last.grid == (148, 1, 1)


def test_packed_matmul_params(fake_gpu: FakeGpu) -> None:
    """The parameter block follows arch_matrix.toml's contract for each layout."""
    m, n, k = 300, 200, 100
    for layout, flags, lda, ldb in (
        ("kn", 0, 104, 200), ("kk", 2, 104, 104), ("mn", 1, 304, 200), ("mk", 3, 304, 104)
    ):  # fmt: skip
        a = mat((m, k), col_major=layout[0] == "m", ld=104 if layout[0] == "k" else 304, ptr=A_PTR)
        b = mat((k, n), col_major=layout[1] == "k", ld=104 if layout[1] == "k" else None, ptr=B_PTR)
        ak.matmul(a, b, "float32")
        f = fake_gpu.last.fields
        assert (f["m"], f["n"], f["k"], f["lda"], f["ldb"], f["ldd"]) == (m, n, k, lda, ldb, n)
        assert (f["flags"], f["out_dtype"], f["scale_mode_a"], f["scale_mode_b"]) == (
            flags, 0, 0, 0,
        )  # fmt: skip
        assert (f["d"], f["a"], f["b"], f["scale_a"], f["scale_b"], f["bias"]) == (
            OUT_PTR, A_PTR, B_PTR, 0, 0, 0,
        )  # fmt: skip
        assert fake_gpu.last.symbol.endswith(f"wg_64x128_{layout}")
    for spelling, code in (("float32", 0), ("float16", 1), ("bfloat16", 2), (None, 2)):
        ak.matmul(*_bf16(8, 8, 8), spelling)
        assert fake_gpu.last.fields["out_dtype"] == code
    out = FakeCudaArray((7, 5), "bfloat16", (40, 1), ptr=D_PTR)  # strided out
    ak.matmul(*_bf16(7, 5, 8), out=out)
    assert fake_gpu.last.fields["ldd"] == 40 and fake_gpu.last.fields["d"] == D_PTR
    ak.matmul(*_bf16(1, 5, 8), out=FakeCudaArray((1, 5), "bfloat16", (99, 1), ptr=D_PTR))
    assert fake_gpu.last.fields["ldd"] == 5  # one row: its stride is never used


def test_packed_tensor_maps(fake_gpu: FakeGpu) -> None:
    """TMA descriptors as the wgmma kernels read them: inner dim = the unit-stride dim, 128-byte
    boxes, box_outer bm / bn for K-major operands and BK = k_bytes / itemsize otherwise."""
    m, n, k = 4096, 2048, 1024
    ak.matmul(*_bf16(m, n, k, "kn"))  # 128x256 tiles, bf16: BK = 64
    a_map, b_map, d_map = fake_gpu.last.tmaps
    assert a_map == map2(128, 1, 9, k, m, 2 * k, 64, 128)
    assert b_map == map2(256, 2, 9, n, k, 2 * n, 64, 64)
    assert d_map == map2(384, 0, 9, n, m, 2 * n, 64, 64)  # the TMA-store epilogue's 64 x 64 boxes
    assert fake_gpu.last.fields["flags"] & 16
    ak.matmul(*_bf16(m, n, k, "mk"))
    a_map, b_map, _ = fake_gpu.last.tmaps
    assert a_map == map2(128, 1, 9, m, k, 2 * m, 64, 64)
    assert b_map == map2(256, 2, 9, k, n, 2 * k, 64, 256)
    fa, fb = ab(m, n, k, "float8_e4m3fn", "kk")
    ak.scaled_mm(fa, fb, out_dtype="float16", use_fast_accum=True)  # 128x256 tiles
    a_map, b_map, _ = fake_gpu.last.tmaps
    assert a_map == map2(128, 1, 0, k, m, k, 128, 128)
    assert b_map == map2(256, 2, 0, k, n, k, 128, 256)
    assert fake_gpu.last.fields["out_dtype"] == 1


def test_cluster_launch(fake_gpu: FakeGpu, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clustered variant launches whole clusters over tile rows rounded up to whole clusters,
    and its K-major b map boxes one CTA's slice of the B tile (N-major boxes are unchanged)."""
    tile = "wg_128x256c2"
    monkeypatch.setattr(gemm, "_wgmma_tile", lambda *args, **kwargs: tile)
    ak.matmul(*_bf16(300, 1000, 512, "kk"))  # 3 tile rows: 2 cluster rows x 4 tile columns
    launch = fake_gpu.last
    assert launch.symbol == f"ak_matmul_bf16_{tile}_kk" and launch.grid == (16, 1, 1)
    assert launch.tmaps[1] == map2(256, 2, 9, 512, 1000, 1024, 64, 128)
    ak.matmul(*_bf16(300, 1000, 512, "kn"))
    assert fake_gpu.last.tmaps[1] == map2(256, 2, 9, 1000, 512, 2000, 64, 64)
    fake_gpu.use("sm_90a", 133)  # an odd SM count: the persistent grid holds whole clusters
    ak.matmul(*_bf16(8192, 8192, 512, "kk"))
    assert fake_gpu.last.grid == (132, 1, 1)
    ak.matmul(*_bf16(48, 4096, 14336, "kk"))  # split-K: the reduction launch too
    main, reduce = fake_gpu.launches[-2:]
    assert main.grid == (64, 1, 1)  # 1 cluster row x 16 tile columns x 2 splits
    assert reduce.grid == (128, 1, 1)  # 48 x 4096 / 4 / 384 threads = 128 blocks


@pytest.mark.parametrize(
    ("sa", "sb", "modes", "strides"),
    [
        (((1,), None), ((1,), None), (1, 1), (0, 0, 0, 0)),
        (((), None), ((1, 1), None), (1, 1), (0, 0, 0, 0)),
        (((300,), None), ((200,), None), (2, 2), (1, 0, 1, 0)),
        (((300, 1), None), ((1, 200), None), (2, 2), (1, 0, 1, 0)),
        (((300,), (3,)), ((1, 200), (999, 2)), (2, 2), (3, 0, 2, 0)),  # strided vectors
        (((300, 1), (7, 7)), ((1,), None), (2, 1), (7, 0, 0, 0)),
        (((300, 8), None), ((2, 8), None), (3, 3), (8, 1, 8, 1)),  # blocks, K = 1000
        (((300, 8), (1, 300)), ((2, 8), (1, 2)), (3, 3), (1, 300, 1, 2)),  # column-major blocks
    ],
)
def test_packed_scales(
    fake_gpu: FakeGpu, sa: Any, sb: Any, modes: tuple[int, int], strides: tuple[int, ...]
) -> None:
    a, b = ab(300, 200, 1000, "float8_e4m3fn", "kk")
    scale_a = f32(sa[0], SA_PTR, strides=sa[1])
    scale_b = f32(sb[0], SB_PTR, strides=sb[1])
    bias = FakeCudaArray((200,), "bfloat16", ptr=BIAS_PTR)
    ak.scaled_mm(a, b, scale_a, scale_b, "bfloat16", bias)
    f = fake_gpu.last.fields
    assert (f["scale_mode_a"], f["scale_mode_b"]) == modes
    assert (f["sa_s0"], f["sa_s1"], f["sb_s0"], f["sb_s1"]) == strides
    assert (f["scale_a"], f["scale_b"], f["bias"], f["flags"]) == (SA_PTR, SB_PTR, BIAS_PTR, 6)


def test_small_scale_shapes_are_equivalent_plain_scales(fake_gpu: FakeGpu) -> None:
    """K <= 128 and N <= 128: a block-scale pair is also a (per-row, per-tensor) pair, which
    means the same; the plain reading wins (int8 takes it too)."""
    for dtype in ("float8_e4m3fn", "int8"):
        a, b = ab(300, 100, 128, dtype, "kk")
        ak.scaled_mm(a, b, f32((300, 1), SA_PTR), f32((1, 1), SB_PTR), "float32")
        f = fake_gpu.last.fields
        assert (f["scale_mode_a"], f["scale_mode_b"]) == (2, 1)


def test_int8_int32_launch(fake_gpu: FakeGpu) -> None:
    ak.scaled_mm(*ab(64, 64, 64, "int8", "kk"), out_dtype="int32")
    f = fake_gpu.last.fields
    assert (f["out_dtype"], f["scale_mode_a"], f["scale_mode_b"], f["flags"]) == (3, 0, 0, 2)


def test_empty_outputs_launch_nothing(fake_gpu: FakeGpu) -> None:
    for m, n in ((0, 5), (4, 0), (0, 0)):
        y = ak.matmul(*_bf16(m, n, 8))
        assert y.shape == (m, n) and y.dtype == "bfloat16"
        y = ak.scaled_mm(*ab(m, n, 8, "int8"), out_dtype="int32")
        assert y.shape == (m, n) and y.dtype == "int32"
    assert not fake_gpu.launches
    ak.matmul(*_bf16(4, 5, 0))  # K = 0 launches (the kernel writes epilogue(0))
    assert fake_gpu.last.fields["k"] == 0


def test_mma_sync_grid_takes_more_than_65535_tile_rows(fake_gpu: FakeGpu) -> None:
    """One block per tile along grid.x: M = 9e6 (70313 tile rows of 128) launches."""
    ak.matmul(*_bf16(9_000_000, 8, 7))
    assert fake_gpu.last.symbol == "ak_matmul_bf16_mma_128x128"
    assert fake_gpu.last.grid == (70313, 1, 1)


@pytest.mark.parametrize(("m", "n", "k"), [(2**31, 8, 64), (8, 2**31, 64), (8, 8, 2**31)])
def test_extents_past_2_31_leave_tma(fake_gpu: FakeGpu, m: int, n: int, k: int) -> None:
    """TMA coordinates are 32-bit: an extent of 2**31 takes the 64-bit mma.sync path even when
    the operands are TMA-legal."""
    ak.matmul(*_bf16(m, n, k))
    assert fake_gpu.last.symbol.startswith("ak_matmul_bf16_mma_")
    assert not fake_gpu.last.tmaps


def _batched(shape: tuple[int, ...], dtype: str = "bfloat16", ptr: int = A_PTR, **kw: Any) -> Any:
    return FakeCudaArray(shape, dtype, ptr=ptr, **kw)


def test_batched_contiguous_one_wgmma_launch(fake_gpu: FakeGpu) -> None:
    """[B, M, K] @ [B, K, N]: one persistent launch over every tile of every matrix; each
    operand's matrices fold into its TMA map's outer dimension."""
    bsz, m, n, k = 3, 300, 200, 128
    y = ak.matmul(_batched((bsz, m, k)), _batched((bsz, k, n), ptr=B_PTR))
    assert y.shape == (bsz, m, n)
    (launch,) = fake_gpu.launches
    f = launch.fields
    assert (f["batch"], f["a_bs"], f["b_bs"], f["d_bs"]) == (bsz, m * k, k * n, m * n)
    assert (f["m"], f["n"], f["k"], f["lda"], f["ldb"], f["ldd"]) == (m, n, k, k, n, n)
    assert launch.symbol == "ak_matmul_bf16_wg_64x128_kn"
    a_map, b_map = launch.tmaps
    assert a_map[4:6] == (k, 2 * m + m)  # K-major a: rows of the next matrices
    assert b_map[4:6] == (n, 2 * k + k)  # N-major b: K rows (K % 64 == 0: no partial stage)
    tiles = bsz * 5 * 2  # 64 x 128 tiles
    assert launch.grid == (tiles, 1, 1)


def test_batched_broadcast_b_folds_into_m(fake_gpu: FakeGpu) -> None:
    """[B, M, K] @ [K, N] with a's matrices back to back is one GEMM of B * M rows."""
    y = ak.matmul(_batched((4, 3, 50, 64)), mat((64, 96), ptr=B_PTR))
    assert y.shape == (4, 3, 50, 96)
    f = fake_gpu.last.fields
    assert (f["m"], f["batch"], f["a_bs"], f["b_bs"], f["d_bs"]) == (600, 1, 0, 0, 0)


def test_batched_broadcast_a_and_stride_zero(fake_gpu: FakeGpu) -> None:
    a = mat((40, 64), ptr=A_PTR)
    b = _batched((5, 64, 96), ptr=B_PTR)
    ak.matmul(a, b)
    f = fake_gpu.last.fields
    assert (f["batch"], f["a_bs"], f["b_bs"], f["d_bs"]) == (5, 0, 64 * 96, 40 * 96)
    expanded = _batched((5, 40, 64), strides=(0, 64, 1))  # torch's expand(): stride 0
    ak.matmul(expanded, b)
    assert fake_gpu.last.fields["a_bs"] == 0


def test_batched_uncollapsible_dims_are_refused(fake_gpu: FakeGpu) -> None:
    """a [2, 1, M, K] x b [1, 3, K, N]: no single stride walks both dims (one launch binds one
    pointer per operand): NotImplementedError before any launch."""
    m, n, k = 16, 32, 64
    with pytest.raises(
        NotImplementedError,
        match=r"matmul: the batch dims of a \(2, 1, 16, 64\), b \(1, 3, 64, 32\) and out "
        r"\(2, 3, 16, 32\) must collapse into one stride each",
    ):
        ak.matmul(_batched((2, 1, m, k)), _batched((1, 3, k, n), ptr=B_PTR))
    assert not fake_gpu.launches


def test_batched_mma_sync_grid_z(fake_gpu: FakeGpu, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "mma_sync")
    m, n, k = 4, 8, 16
    ak.matmul(_batched((65535, m, k)), _batched((65535, k, n), ptr=B_PTR))
    assert fake_gpu.last.grid == (1, 1, 65535) and fake_gpu.last.fields["batch"] == 65535
    with pytest.raises(
        NotImplementedError, match=r"matmul: a batch of at most 65535 matrices runs on the mma"
    ):
        ak.matmul(_batched((65536, m, k)), _batched((65536, k, n), ptr=B_PTR))
    monkeypatch.delenv(ENV)  # wgmma walks any batch from its persistent grid
    ak.matmul(_batched((70000, 8, 64)), _batched((70000, 64, 8), ptr=B_PTR))
    assert fake_gpu.last.symbol.startswith("ak_matmul_bf16_wg_")


def test_batched_mn_major_partial_k_stage_takes_mma_sync(fake_gpu: FakeGpu) -> None:
    """An N-major b whose K is not a multiple of the 64-element stage cannot fold (its last
    stage would read the next matrix's rows); K-major operands always can."""
    ak.matmul(_batched((2, 256, 200)), _batched((2, 200, 256), ptr=B_PTR))
    assert fake_gpu.last.symbol.startswith("ak_matmul_bf16_mma_")
    b_k = _batched((2, 200, 256), ptr=B_PTR, strides=(200 * 256, 1, 200))  # K-major b
    ak.matmul(_batched((2, 256, 200)), b_k)
    assert fake_gpu.last.symbol == "ak_matmul_bf16_wg_64x128_kk"


def test_batched_refused_on_forced_tcgen05(
    fake_gpu: FakeGpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpu.use("sm_100a", 148)
    monkeypatch.setenv(ENV, "tcgen05")
    with pytest.raises(
        NotImplementedError, match=r"matmul: AOTKERNELS_GEMM_PATH=tcgen05 takes one"
    ):
        ak.matmul(_batched((2, 128, 128)), _batched((2, 128, 128), ptr=B_PTR))
    monkeypatch.delenv(ENV)
    monkeypatch.setenv("AOTKERNELS_GEMM_TCGEN05", "1")
    ak.matmul(_batched((2, 128, 128)), _batched((2, 128, 128), ptr=B_PTR))
    assert fake_gpu.last.symbol.startswith("ak_matmul_bf16_mma_")  # batched skips tcgen05


def test_matmul_bias_flag(fake_gpu: FakeGpu) -> None:
    ak.matmul(*_bf16(64, 80, 64), bias=FakeCudaArray((80,), "bfloat16", ptr=BIAS_PTR))
    f = fake_gpu.last.fields
    assert f["flags"] & 4 and f["bias"] == BIAS_PTR


@pytest.mark.parametrize(
    ("target", "da", "db", "symbol"),
    [
        ("sm_90a", "float8_e4m3fn", "float8_e5m2", "ak_scaled_mm_fp8_e4m3xfp8_e5m2_wg_64x64_kk"),
        ("sm_90a", "float8_e5m2", "float8_e4m3fn", "ak_scaled_mm_fp8_e5m2xfp8_e4m3_wg_64x64_kk"),
        ("sm_89", "float8_e4m3fn", "float8_e5m2", "ak_scaled_mm_fp8_e4m3xfp8_e5m2_mma_64x64"),
        ("sm_120a", "float8_e5m2", "float8_e4m3fn", "ak_scaled_mm_fp8_e5m2xfp8_e4m3_mma_64x64"),
    ],
)
def test_mixed_fp8_entries(fake_gpu: FakeGpu, target: str, da: str, db: str, symbol: str) -> None:
    fake_gpu.use(target)
    a, _ = ab(128, 128, 128, da, "kk")
    _, b = ab(128, 128, 128, db, "kk")
    ak.scaled_mm(a, b, f32((1,), SA_PTR), f32((1,), SB_PTR), "bfloat16")
    assert fake_gpu.last.symbol == symbol
    a_map, b_map = (fake_gpu.last.tmaps or [(0,) * 8, (0,) * 8])[:2]
    assert target != "sm_90a" or (a_map[2], b_map[2]) == (0, 0)  # fp8 moves as bytes


def test_mixed_fp8_needs_ada(fake_gpu: FakeGpu) -> None:
    fake_gpu.use("sm_80")
    a, _ = ab(64, 64, 64, "float8_e4m3fn", "kk")
    _, b = ab(64, 64, 64, "float8_e5m2", "kk")
    with pytest.raises(
        NoKernelImageError, match=r"scaled_mm: no float8_e4m3fn x float8_e5m2 GEMM kernel"
    ):
        ak.scaled_mm(a, b, out_dtype="float32")
