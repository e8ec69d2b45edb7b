"""gemm numerics on the GPU: exact results from small-integer inputs (products and sums exact
in f32, compared with torch.equal against an fp64 reference rounded once to the output dtype)
over odd M/N/K, every layout, each path forced with AOTKERNELS_GEMM_PATH, K = 0, misaligned and
row-strided operands, strided out=, every out_dtype spelling; scaled_mm with fp8 (e4m3, e5m2, and
either mixed with the other) and int8 under no, per-tensor, per-row/column and block scales,
with bias, and against torch._scaled_mm / torch._int_mm; random inputs within the documented
bound; the caller's stream; CuPy and JAX in/out; the sm_90a image and its default wgmma pick;
compute-sanitizer.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import aotkernels as ak
from aotkernels import loader
from aotkernels.errors import NoKernelImageError
from aotkernels.ops import _op, gemm
from helpers.gemm import (
    ENV,
    LAYOUTS,
    PATHS,
    generator,
    ids,
    int_operands,
    need_sm90a,
    place,
    poisoned,
    pow2,
    run_forced,
    small_ints,
    torch_dtype,
)
from helpers.reference import (
    assert_gemm_near,
    exact_product,
    exact_product_np,
    gemm_bound,
    rounded_once,
    scaled_mm_ref,
)
from helpers.sanitizer import assert_clean, sanitizer_or_skip

SCRIPTS = Path(__file__).parent / "scripts"
SMALL = [1, 7, 127]
SHAPES = [(m, n, k) for m in SMALL for n in SMALL for k in SMALL] + [
    (4097, 7, 127),
    (7, 4097, 1000),
    (127, 1000, 4097),
    (1000, 4097, 7),
    (1000, 127, 1000),
    (1, 4097, 4097),
    (4097, 1, 1000),
]


@pytest.fixture
def picks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every variant gemm._pick chooses during the test. The torch plan cache starts empty, so
    the first call of each layout goes through the pick (and through AOTKERNELS_GEMM_PATH)."""
    seen: list[Any] = []
    real = gemm._pick

    def spy(*args: Any, **kwargs: Any) -> Any:
        pick = real(*args, **kwargs)
        seen.append(pick)
        return pick

    monkeypatch.setattr(gemm, "_pick", spy)
    monkeypatch.setattr(_op, "_PLANS", {})
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv("AOTKERNELS_GEMM_TCGEN05", raising=False)
    return seen


# --- the image and the default pick ---------------------------------------------------------------


@pytest.mark.gpu
def test_sm90a_image_picks_wgmma(picks: list[Any]) -> None:
    import torch

    need_sm90a()
    fam = loader.family_on("gemm", 0)
    assert fam.binary_version == 90 and fam.choice.target == "sm_90a"
    gen = generator(4096)
    tile = gemm._wgmma_tile(4096, 4096, 1, fam.device.sm_count, False, k=4096)
    assert tile.startswith("wg_128x256")
    for layout in LAYOUTS:
        a, b, av, bv = int_operands(4096, 4096, 4096, "bfloat16", layout, "dense", gen)
        y = ak.matmul(a, b)
        assert picks[-1].symbol == f"ak_matmul_bf16_{tile}_{layout}", picks[-1]
        assert torch.equal(y, rounded_once(exact_product(av, bv), torch.bfloat16))
    a, b, av, bv = int_operands(4096, 4096, 4096, "float8_e4m3fn", "kk", "dense", gen)
    # fp8 with two-level accumulation takes 128 x 128 tiles from 4096 rows, fast accumulation the
    # 16-bit operands' tile.
    for fast, want in ((False, "wg_128x128"), (True, tile)):
        y = ak.scaled_mm(a, b, out_dtype=torch.bfloat16, use_fast_accum=fast)
        assert picks[-1].symbol == f"ak_scaled_mm_fp8_e4m3_{want}_kk"
        assert torch.equal(y, rounded_once(exact_product(av, bv), torch.bfloat16))


@pytest.mark.parametrize(
    ("m", "n", "k", "block", "promoted", "want"),
    [
        (4096, 4096, 4096, False, True, "wg_128x128"),
        (8192, 14336, 4096, False, True, "wg_128x128"),
        (4096, 4096, 4096, False, False, "wg_128x256"),  # fast accumulation
        (4096, 4096, 4096, True, False, "wg_128x256"),  # block scales
        (2048, 2048, 2048, False, True, "wg_128x256"),  # below 4096 rows
        (1024, 14336, 4096, False, True, "wg_128x128"),  # the fill rule's pick
    ],
)
def test_promoted_table(m: int, n: int, k: int, block: bool, promoted: bool, want: str) -> None:
    assert gemm._wgmma_tile(m, n, 1, 132, block, True, 1, k=k, promoted=promoted) == want


@pytest.mark.gpu
def test_invalid_forced_path_on_device(picks: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setenv(ENV, "fast")
    a = torch.ones(8, 8, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"AOTKERNELS_GEMM_PATH must be one of mma_sync, wgmma"):
        ak.matmul(a, a)


@pytest.mark.gpu
def test_forced_path_applies_to_cached_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """AOTKERNELS_GEMM_PATH is read per call: a plan cached for the same layouts must not
    bypass it (an odd-stride operand has no wgmma kernel whatever ran before)."""
    import torch

    need_sm90a()
    monkeypatch.setattr(_op, "_PLANS", {})
    monkeypatch.delenv(ENV, raising=False)
    a = torch.ones(64, 63, device="cuda", dtype=torch.bfloat16)
    b = torch.ones(63, 64, device="cuda", dtype=torch.bfloat16)
    ak.matmul(a, b)  # mma_sync (K * 2 bytes is no multiple of 16), cached
    monkeypatch.setenv(ENV, "wgmma")
    with pytest.raises(NoKernelImageError):
        ak.matmul(a, b)


# --- matmul ---------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES, ids=ids(SHAPES))
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("path", PATHS)
def test_matmul_exact(
    picks: list[Any], monkeypatch: pytest.MonkeyPatch, path: str, dtype: str, layout: str,
    shape: tuple[int, int, int],
) -> None:  # fmt: skip
    """Every layout on each path: mma.sync gets dense operands (odd rows, any alignment),
    wgmma TMA-legal ones (rows padded to 16 bytes, the padding NaN)."""
    import torch

    m, n, k = shape
    monkeypatch.setenv(ENV, path)
    a, b, av, bv = int_operands(m, n, k, dtype, layout, "tma" if path == "wgmma" else "dense",
                             generator(m, n, k))  # fmt: skip
    y = run_forced(path, lambda: ak.matmul(a, b), 1 in shape)
    if y is None:
        return
    assert type(y) is torch.Tensor and y.shape == (m, n) and y.dtype == torch_dtype(dtype)
    assert y.is_contiguous()
    assert torch.equal(y, rounded_once(exact_product(av, bv), torch_dtype(dtype)))
    assert picks[-1].path == path
    if path == "wgmma":
        assert picks[-1].symbol.endswith(f"_{layout}")


def _out_spellings() -> list[tuple[str, str]]:
    return [(kind, out) for kind in ("str", "torch", "numpy") for out in
            ("float16", "bfloat16", "float32")]  # fmt: skip


def _spell(kind: str, name: str) -> Any:
    if kind == "str":
        return name
    if kind == "torch":
        return torch_dtype(name)
    np = pytest.importorskip("numpy")
    if name == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


@pytest.mark.gpu
@pytest.mark.parametrize(("kind", "out"), _out_spellings())
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("path", PATHS)
def test_matmul_out_dtype(
    picks: list[Any], monkeypatch: pytest.MonkeyPatch, path: str, dtype: str, kind: str, out: str
) -> None:
    import torch

    monkeypatch.setenv(ENV, path)
    m, n, k = 127, 1000, 4097
    a, b, av, bv = int_operands(m, n, k, dtype, "kn", "tma", generator(m, n, k, 1))
    y = run_forced(path, lambda: ak.matmul(a, b, _spell(kind, out)), False)
    ref = rounded_once(exact_product(av, bv), torch_dtype(out))
    assert y.dtype == torch_dtype(out) and torch.equal(y, ref)
    assert picks[-1].path == path
    res = torch.empty(m, n, device="cuda", dtype=torch_dtype(out))
    assert ak.matmul(a, b, out, out=res) is res and torch.equal(res, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "shape",
    [(127, 1000, 4097), (1000, 1000, 1000), (4097, 127, 257)],
    ids=ids([(127, 1000, 4097), (1000, 1000, 1000), (4097, 127, 257)]),
)
@pytest.mark.parametrize("path", PATHS)
def test_matmul_random_within_tolerance(
    picks: list[Any], monkeypatch: pytest.MonkeyPatch, path: str, shape: tuple[int, int, int],
    dtype: str,
) -> None:  # fmt: skip
    import torch

    m, n, k = shape
    monkeypatch.setenv(ENV, path)
    gen = generator(m, n, k, 2)
    av = torch.randn(m, k, device="cuda", generator=gen).to(torch_dtype(dtype))
    bv = torch.randn(k, n, device="cuda", generator=gen).to(torch_dtype(dtype))
    a, b = place(av, False, "tma"), place(bv, True, "tma")
    ref = exact_product(av, bv)
    absref = exact_product(av.abs(), bv.abs())
    for out in ("float32", dtype):
        y = run_forced(path, partial(ak.matmul, a, b, out), False)
        assert_gemm_near(y, ref, absref, dtype)
    assert picks[-1].path == path


@pytest.mark.gpu
@pytest.mark.parametrize("path", [None, *PATHS])
def test_k_zero(picks: list[Any], monkeypatch: pytest.MonkeyPatch, path: str | None) -> None:
    """K = 0: zeros (and the bias for scaled_mm), on mma.sync; a forced wgmma has no kernel."""
    import torch

    if path:
        monkeypatch.setenv(ENV, path)
    a = torch.empty(7, 0, device="cuda", dtype=torch.bfloat16)
    b = torch.empty(0, 130, device="cuda", dtype=torch.bfloat16)
    fa = torch.empty(7, 0, device="cuda", dtype=torch.float8_e4m3fn)
    fb = torch.empty(130, 0, device="cuda", dtype=torch.float8_e4m3fn).t()
    ones = torch.ones(1, device="cuda")
    bias = torch.arange(130, device="cuda", dtype=torch.float32).to(torch.bfloat16)
    if path == "wgmma":
        calls: list[Callable[[], Any]] = [
            partial(ak.matmul, a, b),
            partial(ak.scaled_mm, fa, fb, ones, ones, "bfloat16", bias),
        ]
        for call in calls:
            with pytest.raises(NoKernelImageError, match="AOTKERNELS_GEMM_PATH=wgmma"):
                call()
        return
    assert torch.equal(ak.matmul(a, b), torch.zeros(7, 130, device="cuda", dtype=torch.bfloat16))
    out = torch.full((7, 130), float("nan"), device="cuda")
    assert ak.matmul(a, b, "float32", out=out) is out and torch.equal(out, torch.zeros_like(out))
    y = ak.scaled_mm(fa, fb, ones, ones, "bfloat16", bias)
    assert torch.equal(y, bias.expand(7, 130))
    ia = torch.empty(7, 0, device="cuda", dtype=torch.int8)
    ib = torch.empty(0, 130, device="cuda", dtype=torch.int8)
    zeros = torch.zeros(7, 130, device="cuda", dtype=torch.int32)
    assert torch.equal(ak.scaled_mm(ia, ib, out_dtype="int32"), zeros)
    assert all(p.path == "mma_sync" for p in picks) and len(picks) == 4
    for m, n in ((0, 5), (5, 0)):  # nothing to compute: empty results, no launch
        e = ak.matmul(a.new_empty(m, 3), b.new_empty(3, n))
        assert e.shape == (m, n) and e.dtype == torch.bfloat16
    assert len(picks) == 4


def _misaligned_cases() -> list[str]:
    return ["a_offset1", "b_offset1", "a_slice", "b_slice", "odd_ld", "out_offset1"]


@pytest.mark.gpu
@pytest.mark.parametrize("case", _misaligned_cases())
@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize("path", [None, *PATHS])
def test_misaligned_operands(
    picks: list[Any], monkeypatch: pytest.MonkeyPatch, path: str | None, dtype: str, case: str
) -> None:
    """Operands off 16 bytes (storage offset 1, a[:, 1:], odd leading dims) run on mma.sync by
    default and are correct there; a forced wgmma refuses them. A misaligned out= is any
    path's business: the epilogue stores from registers."""
    import torch

    m, n, k = 127, 256, 512
    if path:
        monkeypatch.setenv(ENV, path)
    gen = generator(m, n, k, 3)
    av, bv = small_ints((m, k), dtype, gen), small_ints((k, n), dtype, gen)
    a, b = av, bv.t().contiguous().t()  # kk: TMA-legal for every dtype
    out = None
    if case == "a_offset1":
        a = torch.empty(m * k + 1, device="cuda", dtype=av.dtype)[1:].view(m, k)
    elif case == "b_offset1":
        b = torch.empty(n * k + 1, device="cuda", dtype=av.dtype)[1:].view(n, k).t()
    elif case == "a_slice":
        a = poisoned((m, k + 1), av.dtype)[:, 1:]
    elif case == "b_slice":
        b = poisoned((n, k + 1), av.dtype)[:, 1:].t()
    elif case == "odd_ld":
        a = poisoned((m, k + 3), av.dtype)[:, :k]
    else:
        out = torch.full((m * n + 1,), float("nan"), device="cuda")[1:].view(m, n)
    a.copy_(av)
    b.copy_(bv)
    ref = rounded_once(exact_product(av, bv), torch.float32)
    call: Callable[[], Any] = (
        partial(ak.matmul, a, b, "float32", out=out)
        if dtype == "bfloat16"
        else partial(ak.scaled_mm, a, b, out_dtype="float32", out=out)
    )
    if path == "wgmma" and case != "out_offset1":
        need_sm90a()
        with pytest.raises(NoKernelImageError, match="AOTKERNELS_GEMM_PATH=wgmma"):
            call()
        return
    y = run_forced(path or "", call, False)
    assert torch.equal(y, ref)
    if out is not None:
        assert y is out
    want = path or ("wgmma" if case == "out_offset1" and _sm90() else "mma_sync")
    assert picks[-1].path == want


def _sm90() -> bool:
    import torch

    return bool(torch.cuda.get_device_capability(0) == (9, 0))


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("path", PATHS)
def test_row_strided_operands_and_out(
    picks: list[Any], monkeypatch: pytest.MonkeyPatch, path: str, layout: str
) -> None:
    """Row stride > cols for a, b and out (NaN in the gaps): the gaps are neither read nor
    written."""
    import torch

    monkeypatch.setenv(ENV, path)
    m, n, k = 257, 200, 300
    gen = generator(m, n, k, 4)
    av, bv = small_ints((m, k), "bfloat16", gen), small_ints((k, n), "bfloat16", gen)
    a, b = place(av, layout[0] == "m", "wide"), place(bv, layout[1] == "k", "wide")
    base = torch.full((m, n + 24), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = base[:, :n]
    y = run_forced(path, lambda: ak.matmul(a, b, out=out), False)
    assert y is out and torch.equal(out, rounded_once(exact_product(av, bv), torch.bfloat16))
    assert base[:, n:].isnan().all()
    assert picks[-1].path == path


# --- scaled_mm ------------------------------------------------------------------------------------

FP8 = ["float8_e4m3fn", "float8_e5m2"]
SCALED_SHAPES = [(7, 7, 7), (127, 7, 1000), (7, 127, 127), (127, 1000, 4097), (4097, 127, 1000),
                 (1000, 4097, 129), (1, 127, 300), (300, 1, 4097)]  # fmt: skip
SCALE_KINDS = {"none": "float32", "tensor": "bfloat16", "vector": "float16", "block": "bfloat16"}


def _scales(kind: str, m: int, n: int, k: int, gen: Any) -> tuple[Any, Any]:
    """Power-of-two scales of ``kind``; block scales in [1/2, 2] so the f32 two-level sums stay
    exact (multiples of 1/4 below 2**20)."""
    if kind == "none":
        return None, None
    if kind == "tensor":
        return pow2((1,), gen), pow2((), gen)
    if kind == "vector":
        return pow2((m, 1), gen), pow2((n,), gen)
    kb = math.ceil(k / 128)
    sb = pow2((math.ceil(n / 128), kb), gen, -1, 1).t().contiguous().t()  # any strides
    return pow2((m, kb), gen, -1, 1), sb


# int8 takes no block scales (a CPU test checks the TypeError).
DTYPE_KINDS = [(d, kind) for d in [*FP8, "int8"] for kind in SCALE_KINDS
               if not (d == "int8" and kind == "block")]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SCALED_SHAPES, ids=ids(SCALED_SHAPES))
@pytest.mark.parametrize(("dtype", "kind"), DTYPE_KINDS)
@pytest.mark.parametrize("layout", ["kk", "mn"])
@pytest.mark.parametrize("path", PATHS)
def test_scaled_mm_exact(
    picks: list[Any], monkeypatch: pytest.MonkeyPatch, path: str, dtype: str, layout: str,
    kind: str, shape: tuple[int, int, int],
) -> None:  # fmt: skip
    """Small integers and power-of-two scales: exact. 8-bit wgmma takes kk only."""
    import torch

    m, n, k = shape
    monkeypatch.setenv(ENV, path)
    gen = generator(m, n, k, 5)
    a, b, av, bv = int_operands(m, n, k, dtype, layout, "tma" if path == "wgmma" else "dense", gen)
    sa, sb = _scales(kind, m, n, k, gen)
    out = "int32" if dtype == "int8" and kind == "none" else SCALE_KINDS[kind]

    def call() -> Any:
        return ak.scaled_mm(a, b, sa, sb, out)

    if path == "wgmma" and layout != "kk":
        need_sm90a()
        with pytest.raises(NoKernelImageError, match="AOTKERNELS_GEMM_PATH=wgmma"):
            call()
        return
    y = run_forced(path, call, 1 in shape)
    if y is None:
        return
    assert y.shape == (m, n) and y.dtype == torch_dtype(out)
    assert torch.equal(y, rounded_once(scaled_mm_ref(av, bv, sa, sb), torch_dtype(out)))
    assert picks[-1].path == path


@pytest.mark.gpu
@pytest.mark.parametrize("out", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "int8"])
@pytest.mark.parametrize("path", PATHS)
def test_scaled_mm_bias(
    picks: list[Any], monkeypatch: pytest.MonkeyPatch, path: str, dtype: str, out: str
) -> None:
    """bias[n] (out_dtype) added after scaling; into a row-strided out= as well."""
    import torch

    monkeypatch.setenv(ENV, path)
    m, n, k = 127, 1000, 256
    gen = generator(m, n, k, 6)
    a, b, av, bv = int_operands(m, n, k, dtype, "kk", "tma", gen)
    sa, sb = pow2((m,), gen), pow2((1, n), gen)
    bias = small_ints((n,), "float32", gen, -50, 50).to(torch_dtype(out))
    ref = rounded_once(scaled_mm_ref(av, bv, sa, sb, bias), torch_dtype(out))
    y = run_forced(path, lambda: ak.scaled_mm(a, b, sa, sb, out, bias), False)
    assert torch.equal(y, ref)
    base = torch.full((m, n + 8), float("nan"), device="cuda", dtype=torch_dtype(out))
    view = base[:, :n]
    assert ak.scaled_mm(a, b, sa, sb, out, bias, out=view) is view
    assert torch.equal(base[:, :n], ref) and base[:, n:].isnan().all()
    assert picks[-1].path == path


def _torch_scaled_mm(a: Any, b: Any, sa: Any, sb: Any, out: Any) -> Any:
    import torch

    try:
        r = torch._scaled_mm(a, b, sa, sb, out_dtype=out)
    except RuntimeError as e:  # a case this torch build does not take
        pytest.skip(f"torch._scaled_mm refuses this case: {e}")
    return r[0] if isinstance(r, tuple) else r


TORCH_FP8_SHAPES = [(1, 16, 16), (127, 1008, 4096), (4097, 256, 1024)]  # K, N multiples of 16


@pytest.mark.gpu
@pytest.mark.parametrize("shape", TORCH_FP8_SHAPES, ids=ids(TORCH_FP8_SHAPES))
@pytest.mark.parametrize(("kind", "out"), [("tensor", "bfloat16"), ("tensor", "float32"),
                                           ("tensor", "float16"), ("row", "bfloat16")])  # fmt: skip
@pytest.mark.parametrize("path", PATHS)
def test_fp8_matches_torch_scaled_mm(
    picks: list[Any], monkeypatch: pytest.MonkeyPatch, path: str, kind: str, out: str,
    shape: tuple[int, int, int],
) -> None:  # fmt: skip
    """e4m3, a row-major and b column-major as torch._scaled_mm wants: small integers with
    power-of-two scales agree bitwise; random values within the fp8 bounds above."""
    import torch

    m, n, k = shape
    monkeypatch.setenv(ENV, path)
    gen = generator(m, n, k, 7)
    a, b, av, bv = int_operands(m, n, k, "float8_e4m3fn", "kk", "dense", gen)
    if kind == "tensor":
        sa, sb = pow2((), gen), pow2((), gen)
    else:
        sa, sb = pow2((m, 1), gen), pow2((1, n), gen)
    y = run_forced(path, lambda: ak.scaled_mm(a, b, sa, sb, out), m == 1)
    if y is None:
        return
    assert torch.equal(y, rounded_once(scaled_mm_ref(av, bv, sa, sb), torch_dtype(out)))
    assert picks[-1].path == path
    ra = torch.randn(m, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    rb = torch.randn(n, k, device="cuda", generator=gen).to(torch.float8_e4m3fn).t()
    rs_a, rs_b = sa * 0.37, sb * 1.3  # not powers of two
    mine = ak.scaled_mm(ra, rb, rs_a, rs_b, out)
    ref = scaled_mm_ref(ra, rb, rs_a, rs_b)
    absref = scaled_mm_ref(ra.float().abs(), rb.float().abs(), rs_a, rs_b).abs()
    assert_gemm_near(mine, ref, absref, "float8_e4m3fn")
    theirs = _torch_scaled_mm(ra, rb, rs_a, rs_b, torch_dtype(out))
    err = (mine.double() - theirs.double()).abs()
    assert (err <= 2 * gemm_bound(ref, absref, out, "float8_e4m3fn")).all()
    assert torch.equal(
        ak.scaled_mm(a, b, sa, sb, out), _torch_scaled_mm(a, b, sa, sb, torch_dtype(out))
    )


@pytest.mark.gpu
@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("block", [False, True])
@pytest.mark.parametrize("path", PATHS)
def test_fp8_random_within_tolerance(
    picks: list[Any], monkeypatch: pytest.MonkeyPatch, path: str, block: bool, dtype: str,
    fast: bool,
) -> None:  # fmt: skip
    """Random fp8 (e5m2 too, which torch._scaled_mm does not multiply by itself) against the
    upcast reference, per-tensor and block scales (an fp32 reference applying them per block),
    in both accumulation modes."""
    import torch

    monkeypatch.setenv(ENV, path)
    for m, n, k in ((127, 1000, 4097), (4097, 257, 300)):
        gen = generator(m, n, k, 8)
        av = (torch.randn(m, k, device="cuda", generator=gen) * 4).to(torch_dtype(dtype))
        bv = (torch.randn(n, k, device="cuda", generator=gen) * 4).to(torch_dtype(dtype)).t()
        a, b = place(av, False, "tma"), place(bv, True, "tma")
        if block:
            kb = math.ceil(k / 128)
            sa = torch.rand(m, kb, device="cuda", generator=gen) + 0.1
            sb = torch.rand(math.ceil(n / 128), kb, device="cuda", generator=gen) + 0.1
        else:
            sa, sb = torch.tensor([0.3], device="cuda"), torch.tensor([1.7], device="cuda")
        call = partial(ak.scaled_mm, a, b, sa, sb, "float32", use_fast_accum=fast)
        y = run_forced(path, call, False)
        absref = scaled_mm_ref(av.float().abs(), bv.float().abs(), sa, sb).abs()
        assert_gemm_near(y, scaled_mm_ref(av, bv, sa, sb), absref, dtype)
        assert picks[-1].path == path


# The long-K accumulation test: positive operands, so that the sums grow and each addition's
# rounding error counts, and K long enough for fp8 wgmma's reduced-precision accumulation to show.
LONG_K = (256, 512, 16384)
# max |y - ref| / max |ref|: the worst case of a sequential f32 sum of K terms, K * 2**-24 of the
# sum of their magnitudes (which max |ref| is, the operands being positive).
TWO_LEVEL_BOUND = LONG_K[2] * 2.0**-24


@pytest.mark.gpu
@pytest.mark.parametrize("path", PATHS)
def test_fp8_two_level_accumulation(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """use_fast_accum=False (the default) keeps the error of a long K within f32 accumulation's
    against an f64 reference on every tile of the path; use_fast_accum=True accumulates
    directly: on the wgmma path with fp8 wgmma's reduced precision, a larger error (mma.sync
    adds into f32 either way). Both are bitwise repeatable."""
    import torch

    m, n, k = LONG_K
    monkeypatch.setenv(ENV, path)
    gen = generator(m, n, k, 10)
    av = (torch.rand(m, k, device="cuda", generator=gen) + 1).to(torch.float8_e4m3fn)
    bv = (torch.rand(n, k, device="cuda", generator=gen) + 1).to(torch.float8_e4m3fn).t()
    ref = av.double() @ bv.double()
    one = torch.ones((), device="cuda")
    tiles = [None]
    if path == "wgmma":
        need_sm90a()
        fam = loader.family_on("gemm", 0)
        tiles = sorted(v for v, info in fam.variants.items() if info["path"] == "wgmma")
    real = gemm._pick
    for tile in tiles:
        if tile is not None:

            def forced(*args: Any, tile: str = tile, **kwargs: Any) -> Any:
                pick = real(*args, **kwargs)
                return gemm._Pick(pick.symbol.replace(f"_{pick.variant}_", f"_{tile}_"), tile,
                                  "wgmma")  # fmt: skip

            monkeypatch.setattr(gemm, "_pick", forced)
        monkeypatch.setattr(_op, "_PLANS", {})
        err = {}
        for fast in (False, True):
            y = ak.scaled_mm(av, bv, one, one, "float32", use_fast_accum=fast)
            assert torch.equal(y, ak.scaled_mm(av, bv, one, one, "float32", use_fast_accum=fast))
            err[fast] = ((y.double() - ref).abs().max() / ref.abs().max()).item()
        assert err[False] <= TWO_LEVEL_BOUND, (tile, err)
        assert err[False] <= err[True], (tile, err)
        if path == "wgmma":  # the inputs make fp8 wgmma's own accumulation error show
            assert err[True] > TWO_LEVEL_BOUND, (tile, err)


INT_MM_SHAPES = [(17, 8, 16), (127, 1000, 4096), (4097, 256, 1008)]  # M > 16, K and N % 8 == 0


@pytest.mark.gpu
@pytest.mark.parametrize("shape", INT_MM_SHAPES, ids=ids(INT_MM_SHAPES))
@pytest.mark.parametrize("layout", ["kk", "kn"])
@pytest.mark.parametrize("path", PATHS)
def test_int8_matches_torch_int_mm(
    picks: list[Any], monkeypatch: pytest.MonkeyPatch, path: str, layout: str,
    shape: tuple[int, int, int],
) -> None:  # fmt: skip
    """Full-range int8 into int32: bitwise torch._int_mm (and the int64 reference)."""
    import torch

    m, n, k = shape
    monkeypatch.setenv(ENV, path)
    gen = generator(m, n, k, 9)
    av = torch.randint(-128, 128, (m, k), device="cuda", generator=gen, dtype=torch.int8)
    bv = torch.randint(-128, 128, (k, n), device="cuda", generator=gen, dtype=torch.int8)
    a, b = av, place(bv, layout[1] == "k")
    if path == "wgmma" and layout != "kk":
        need_sm90a()
        with pytest.raises(NoKernelImageError):
            ak.scaled_mm(a, b, out_dtype="int32")
        return
    y = run_forced(path, lambda: ak.scaled_mm(a, b, out_dtype=torch.int32), False)
    assert y.dtype == torch.int32
    assert torch.equal(y, torch._int_mm(av, bv))
    assert torch.equal(y.long(), exact_product(av, bv).long())
    assert picks[-1].path == path


# --- mixed fp8 ------------------------------------------------------------------------------------


MIXED = [("float8_e4m3fn", "float8_e5m2"), ("float8_e5m2", "float8_e4m3fn")]


@pytest.mark.gpu
@pytest.mark.parametrize(("da", "db"), MIXED)
@pytest.mark.parametrize("path", [None, *PATHS])
@pytest.mark.parametrize(
    "shape", MIXED_SHAPES := [(7, 33, 65), (256, 512, 1024), (1, 16, 16)], ids=ids(MIXED_SHAPES)
)
def test_mixed_fp8_exact_and_random(
    monkeypatch: pytest.MonkeyPatch, path: str | None, da: str, db: str,
    shape: tuple[int, int, int],
) -> None:  # fmt: skip
    """e4m3 x e5m2 (either way round): small integers with power-of-two scales exact against
    fp64; random values within the fp8 bound; torch._scaled_mm where this torch takes it."""
    import torch

    if path is not None:
        monkeypatch.setenv(ENV, path)
    if path == "wgmma":
        need_sm90a()
    m, n, k = shape
    gen = generator(m, n, k, 14)
    av, bv = small_ints((m, k), da, gen), small_ints((n, k), db, gen).t()
    sa, sb = pow2((), gen), pow2((), gen)
    try:
        y = ak.scaled_mm(av, bv, sa, sb, "bfloat16")
    except NoKernelImageError:
        assert path == "wgmma" and (65 in shape or m == 1)  # not TMA-legal (see run_forced)
        return
    assert torch.equal(y, rounded_once(scaled_mm_ref(av, bv, sa, sb), torch.bfloat16))
    ra = torch.randn(m, k, device="cuda", generator=gen).to(torch_dtype(da))
    rb = torch.randn(n, k, device="cuda", generator=gen).to(torch_dtype(db)).t()
    rs_a, rs_b = sa * 0.37, sb * 1.3
    mine = ak.scaled_mm(ra, rb, rs_a, rs_b, "float32")
    ref = scaled_mm_ref(ra, rb, rs_a, rs_b)
    absref = scaled_mm_ref(ra.float().abs(), rb.float().abs(), rs_a, rs_b).abs()
    assert_gemm_near(mine, ref, absref, "float8_e4m3fn")
    if path is None and m % 16 == 0 and n % 16 == 0 and k % 16 == 0:
        theirs = _torch_scaled_mm(ra, rb, rs_a, rs_b, torch.float32)
        err = (mine.double() - theirs.double()).abs()
        assert (err <= 2 * gemm_bound(ref, absref, "float32", da)).all()


# --- every sm_90a tile ----------------------------------------------------------------------------


def _force_tile(monkeypatch: pytest.MonkeyPatch, real: Any, tile: str) -> None:
    """Run every wgmma call on ``tile`` (the table's split-K choice kept)."""

    def forced(*args: Any, **kwargs: Any) -> Any:
        pick = real(*args, **kwargs)
        name = pick.symbol.replace(f"_{pick.variant}_", f"_{tile}_")
        return gemm._Pick(name, tile, "wgmma")

    monkeypatch.setattr(gemm, "_pick", forced)
    monkeypatch.setattr(_op, "_PLANS", {})


# (dtype, layout, scale kind, bias, shape): ragged edges in every dim; the shapes of M = 64 are
# split along K by the table (the last split and stage partial), (130, 300, 1000) spans tile rows;
# K = 1400 is 11 stages of 128 (the promoted loop's trips of 4, 4, 2 and 1 stages on 64-column
# tiles, 2 and 1 on 128-column ones; the 128-column tiles read their epilogue factors under the
# last trip's last batch, of 2 or 1 stages). The shapes of 1100 rows give each CTA several tiles;
# K = 300 and 100 end on a trip of one stage (3 and 1 stages).
VARIANT_CASES = [
    ("bfloat16", "kk", "none", False, (130, 300, 1000)),
    ("float16", "mn", "none", True, (7, 1000, 129)),
    ("bfloat16", "kn", "none", True, (64, 1000, 16400)),
    ("float8_e4m3fn", "kk", "vector", True, (130, 1000, 1000)),
    ("float8_e4m3fn", "kk", "tensor", False, (64, 1000, 24700)),
    ("float8_e4m3fn", "kk", "block", True, (130, 300, 1000)),
    ("float8_e4m3fn", "kk", "tensor", True, (130, 300, 1400)),
    ("float8_e4m3fn", "kk", "block", False, (130, 300, 1400)),
    ("float8_e5m2", "kk", "block", False, (64, 1000, 24700)),
    ("float8_e4m3fn", "kk", "vector", True, (1100, 4000, 300)),
    ("float8_e4m3fn", "kk", "tensor", True, (1100, 2000, 100)),
    ("int8", "kk", "none", False, (130, 300, 1000)),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("dtype", "layout", "kind", "bias", "shape"), VARIANT_CASES)
def test_every_wgmma_tile_exact(
    monkeypatch: pytest.MonkeyPatch, dtype: str, layout: str, kind: str, bias: bool,
    shape: tuple[int, int, int],
) -> None:  # fmt: skip
    """Each wgmma variant of the sm_90a image that may take the call, forced in turn whatever the
    table would pick (its split-K choice kept): exact on small integers with power-of-two scales
    and a bias."""
    import torch

    need_sm90a()
    m, n, k = shape
    fam = loader.family_on("gemm", 0)
    tiles = sorted(v for v, info in fam.variants.items() if info["path"] == "wgmma")
    gen = generator(m, n, k, 9)
    a, b, av, bv = int_operands(m, n, k, dtype, layout, "tma", gen)
    sa, sb = _scales(kind, m, n, k, gen)
    out = "int32" if dtype == "int8" else SCALE_KINDS[kind]
    bias_v = small_ints((n,), "float32", gen, -50, 50).to(torch_dtype(out)) if bias else None
    ref = rounded_once(scaled_mm_ref(av, bv, sa, sb, bias_v), torch_dtype(out))
    real = gemm._pick
    for tile in tiles:
        if fam.variants[tile].get("swap_ab") and (layout[0] != "k" or kind == "block"):
            continue  # swapped tiles take a K-major a and no block scales (the table's rule)
        _force_tile(monkeypatch, real, tile)
        if dtype in ("bfloat16", "float16"):
            assert torch.equal(ak.matmul(a, b, out, bias=bias_v), ref), tile
            continue
        for fast in (False, True):  # no effect on int8 and block scales; fp8: both loops
            y = ak.scaled_mm(a, b, sa, sb, out, bias_v, use_fast_accum=fast)
            assert torch.equal(y, ref), (tile, fast)


# Cluster tiles: tile rows that do not fill the last cluster (1, 3 and 5 rows of 128), several
# matrices (each one's rows padded to whole clusters), B N-major and K-major (TMA-legal shapes:
# a batched N-major b needs K a multiple of the 64-element stage).
CLUSTER_CASES = [((1, 100, 72, 200), "kk"), ((3, 384, 304, 128), "kn"), ((2, 640, 520, 72), "kk")]


@pytest.mark.gpu
@pytest.mark.parametrize(("shape", "layout"), CLUSTER_CASES)
def test_cluster_tiles_batched_and_repeatable(
    monkeypatch: pytest.MonkeyPatch, shape: tuple[int, int, int, int], layout: str
) -> None:
    """Each multicast-cluster wgmma variant (the K-split ones are swapped tiles, one matrix: see
    test_gemm_swapped.py), forced: batched small integers exact, and random values
    bitwise the same on every run (the cluster's CTAs share B stages, not partial sums)."""
    import torch

    need_sm90a()
    batch, m, n, k = shape
    fam = loader.family_on("gemm", 0)
    tiles = sorted(
        v
        for v, i in fam.variants.items()
        if i["path"] == "wgmma" and i["cluster"] > 1 and not i.get("ksplit")
    )
    assert tiles
    gen = generator(*shape, 17)
    a = small_ints((batch, m, k), "bfloat16", gen)
    b = small_ints((batch, n, k), "bfloat16", gen).mT
    if layout == "kn":
        b = b.contiguous()
    ref = torch.matmul(a.double(), b.double()).float().to(torch.bfloat16)
    ra = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    rb = torch.randn(n, k, device="cuda", generator=gen).to(torch.bfloat16).t()
    real = gemm._pick
    for tile in tiles:
        _force_tile(monkeypatch, real, tile)
        assert torch.equal(ak.matmul(a, b), ref), tile
        first = ak.matmul(ra, rb)
        for _ in range(3):
            assert torch.equal(ak.matmul(ra, rb), first), tile


# --- the caller's stream --------------------------------------------------------------------------


@pytest.mark.gpu
def test_runs_on_the_callers_stream() -> None:
    import torch

    gen = generator(11)
    av, bv = small_ints((1000, 1000), "bfloat16", gen), small_ints((1000, 1000), "bfloat16", gen)
    ref = rounded_once(exact_product(av, bv), torch.bfloat16)
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        y = ak.matmul(av, bv)
        z = ak.matmul(av, bv, stream=s.cuda_stream)
    s.synchronize()
    assert torch.equal(y, ref) and torch.equal(z, ref)


# --- other frameworks -----------------------------------------------------------------------------


@pytest.mark.gpu
def test_cupy_in_cupy_out() -> None:
    cupy = pytest.importorskip("cupy")
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    ah = rng.integers(-3, 4, (127, 1000)).astype(np.float16)
    bh = rng.integers(-3, 4, (1000, 129)).astype(np.float16)
    a, b = cupy.asarray(ah), cupy.asfortranarray(cupy.asarray(bh))
    y = ak.matmul(a, b)
    assert type(y) is cupy.ndarray and y.dtype == np.float16 and y.shape == (127, 129)
    ref = exact_product_np(ah, bh)
    assert np.array_equal(cupy.asnumpy(y), ref.astype(np.float32).astype(np.float16))
    z = ak.matmul(a, b, "float32")
    assert z.dtype == np.float32 and np.array_equal(cupy.asnumpy(z), ref.astype(np.float32))
    out = cupy.full((127, 129), np.nan, np.float32)
    assert ak.matmul(a, b, np.dtype("float32"), out=out) is out
    assert np.array_equal(cupy.asnumpy(out), ref.astype(np.float32))


@pytest.mark.gpu
def test_jax_in_jax_out() -> None:
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    np = pytest.importorskip("numpy")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("JAX sees no GPU")
    rng = np.random.default_rng(1)
    ah = rng.integers(-3, 4, (127, 1000)).astype(np.float32)
    bh = rng.integers(-3, 4, (1000, 129)).astype(np.float32)
    a = jax.device_put(jnp.asarray(ah, jnp.bfloat16), gpu)
    b = jax.device_put(jnp.asarray(bh, jnp.bfloat16), gpu)
    y = ak.matmul(a, b)
    assert isinstance(y, jax.Array) and y.dtype == jnp.bfloat16 and y.shape == (127, 129)
    ref = exact_product_np(ah, bh)
    assert np.array_equal(np.asarray(y.astype(jnp.float32)), np.asarray(
        jnp.asarray(ref.astype(np.float32), jnp.bfloat16).astype(jnp.float32)))  # fmt: skip
    z = ak.matmul(a, b, jnp.float32)
    assert z.dtype == jnp.float32 and np.array_equal(np.asarray(z), ref.astype(np.float32))


# --- compute-sanitizer ----------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_compute_sanitizer_clean(tool: str) -> None:
    """tests/scripts/sanitize_gemm.py (no torch: raw device buffers) under the tool: every path,
    dtype and scale mode on small odd shapes, exact-size input buffers (a tail over-read is a
    memcheck error), results checked against numpy."""
    sanitizer = sanitizer_or_skip()
    proc = subprocess.run(
        [sanitizer, "--tool", tool, "--error-exitcode", "9", sys.executable,
         str(SCRIPTS / "sanitize_gemm.py")],
        capture_output=True, text=True, timeout=600,
        env={k: v for k, v in os.environ.items() if k != ENV},
    )  # fmt: skip
    assert_clean(proc, "SANITIZE_GEMM_OK")
