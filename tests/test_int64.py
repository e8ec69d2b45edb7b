"""64-bit indexing on the GPU: strides, storage offsets, element counts and out= strides past
2**31 elements, one test per op and case.

Every test builds a view whose row stride, offset or size passes 2**31 elements inside a large
buffer, runs the op and compares with an fp32/fp64 torch reference computed on the small logical
view (or on slices around the 2**31 boundary). Sentinel runs around every row of every large
buffer must come back untouched: a 32-bit product in the index math shows up either as a wrong
row or as a write into a sentinel. Inputs hold small integers where the reference must be exact
(GEMM), random values elsewhere.

Each GPU test needs up to ~17 GiB of free GPU memory; it skips with the amount when the GPU has
less, and frees its buffers before the next test starts. One CPU test checks the same values all
the way into the packed launch parameters, for DLPack arrays whose start is data + byte_offset.
"""

from __future__ import annotations

import gc
import math
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import aotkernels as ak
from aotkernels.dtypes import DTYPES
from helpers import reference
from helpers.fake_dlpack import FakeCudaArray
from helpers.fake_family import fake_family

GiB = 1 << 30
BIG = 2**31  # the first element index a signed 32-bit product cannot reach
GUARD = 64  # sentinel elements on each side of every row
ITEM = {d.long: d.itemsize for d in DTYPES.values()}  # "bfloat16" -> 2

gpu = pytest.mark.gpu

# (rtol, atol) against fp64, as tests/test_norm.py and tests/test_softmax.py document them.
ROWWISE_TOL = {"float32": (2e-5, 2e-5), "float16": (1e-3, 1e-5), "bfloat16": (8e-3, 1e-5)}
SOFTMAX_TOL = {"float32": (2e-5, 1e-7), "float16": (1e-3, 1e-7), "bfloat16": (8e-3, 1e-7)}


@pytest.fixture(autouse=True)
def _release_memory() -> Iterator[None]:
    yield
    gc.collect()
    torch = sys.modules.get("torch")  # the CPU tests here run without torch
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def need(nbytes: int) -> None:
    """Skip unless ``nbytes`` (plus 1 GiB of slack) are free on the current GPU."""
    import torch

    gc.collect()
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    if free < nbytes + GiB:
        pytest.skip(
            f"needs {(nbytes + GiB) / GiB:.1f} GiB of free GPU memory, has {free / GiB:.1f} GiB"
        )


def _dt(name: str) -> Any:
    import torch

    return getattr(torch, name)


class Rows:
    """A [rows, cols] view at row stride ``stride`` (elements) inside one buffer, starting at
    element ``GUARD``, with GUARD sentinel elements on both sides of every row."""

    def __init__(self, rows: int, cols: int, dtype: str, stride: int, fill: str = "randn") -> None:
        import torch

        n = GUARD + stride * (rows - 1) + cols + GUARD
        self.buf = torch.empty(n, dtype=_dt(dtype), device="cuda")
        self.view = self.buf.as_strided((rows, cols), (stride, 1), GUARD)
        self.windows = []
        for r in range(rows):
            start = GUARD + r * stride
            self.windows += [(start - GUARD, start), (start + cols, start + cols + GUARD)]
        self.sentinel = torch.full((GUARD,), -77.0, device="cuda").to(_dt(dtype))
        for lo, hi in self.windows:
            self.buf[lo:hi].copy_(self.sentinel)
        self.view.copy_(_values((rows, cols), dtype, fill))

    def intact(self) -> bool:
        """Every sentinel run still holds its bits."""
        import torch

        ref = self.sentinel.view(torch.uint8)
        return all(torch.equal(self.buf[lo:hi].view(torch.uint8), ref) for lo, hi in self.windows)


def _values(shape: tuple[int, ...], dtype: str, fill: str) -> Any:
    """randn, or small integers in [-2, 2] (exact products and sums for the GEMM checks)."""
    import torch

    if fill == "ints":
        return torch.randint(-2, 3, shape, device="cuda").to(_dt(dtype))
    if fill == "nan":
        return torch.full(shape, float("nan"), device="cuda", dtype=_dt(dtype))
    return torch.randn(shape, device="cuda", dtype=_dt(dtype))


def _close(y: Any, ref: Any, dtype: str, table: dict[str, tuple[float, float]]) -> None:
    import torch

    rtol, atol = table[dtype]
    torch.testing.assert_close(y.double(), ref.double(), rtol=rtol, atol=atol)


def _weight(h: int, dtype: str) -> Any:
    import torch

    return (torch.rand(h, device="cuda") + 0.5).to(_dt(dtype))


# --- norm and softmax: row strides ----------------------------------------------------------

NORM_CASES = [("bfloat16", h, s) for h in (128, 4096, 40000) for s in (BIG, BIG + 1)]
NORM_CASES += [("float16", 128, BIG), ("float32", 128, BIG), ("float32", 4096, BIG + 1)]


def _case_id(c: tuple[str, int, int]) -> str:
    return f"{c[0]}-h{c[1]}-stride2_31{'p1' if c[2] == BIG + 1 else ''}"


@gpu
@pytest.mark.parametrize("which", ["x", "residual", "both"])
@pytest.mark.parametrize("case", NORM_CASES, ids=[_case_id(c) for c in NORM_CASES])
def test_fused_add_rms_norm_row_stride(case: tuple[str, int, int], which: str) -> None:
    """The reported case (x rows 2**31 apart, contiguous residual) and its mirror images; a
    stride of 2**31 + 1 takes the scalar layout."""
    import torch

    dtype, h, stride = case
    need(2 * (stride + h) * ITEM[dtype])
    bufs = {n: Rows(2, h, dtype, stride) for n in ("x", "residual") if which in (n, "both")}
    x = bufs["x"].view if "x" in bufs else _values((2, h), dtype, "randn")
    r = bufs["residual"].view if "residual" in bufs else _values((2, h), dtype, "randn")
    w = _weight(h, dtype)
    for _ in range(2):  # the second call takes the cached plan (torch fast path)
        s = (x.float() + r.float()).to(x.dtype)  # vLLM: the sum rounded to the storage dtype
        ref_x = reference.rms_norm(s, w)
        res = ak.fused_add_rms_norm(x, r, w, 1e-6)
        assert res[0] is x and res[1] is r
        assert torch.equal(r, s)
        _close(x, ref_x, dtype, ROWWISE_TOL)
        assert all(b.intact() for b in bufs.values())


def _rowwise(op: str, x: Any, w: Any, b: Any, *, ref: bool = False, **kw: Any) -> Any:
    """rms_norm, layer_norm or softmax of ``x`` (weight ``w``, bias ``b``): ours (``kw`` such as
    ``out=`` passed on) or, with ``ref``, the fp64 reference."""
    if op == "softmax":
        return reference.softmax(x) if ref else ak.softmax(x, **kw)
    if op == "rms_norm":
        return reference.rms_norm(x, w) if ref else ak.rms_norm(x, w, **kw)
    return reference.layer_norm(x, w, b) if ref else ak.layer_norm(x, w, b, **kw)


@gpu
@pytest.mark.parametrize("mode", ["x", "out", "in_place"])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "softmax"])
@pytest.mark.parametrize("case", NORM_CASES, ids=[_case_id(c) for c in NORM_CASES])
def test_rowwise_row_stride(case: tuple[str, int, int], op: str, mode: str) -> None:
    """x rows 2**31 apart (out allocated), out= rows 2**31 apart (x contiguous), or both in
    place on one strided view."""
    import torch

    dtype, h, stride = case
    need((2 if mode == "in_place" else 1) * (stride + h) * ITEM[dtype] + GiB)
    big = Rows(2, h, dtype, stride)
    x = big.view if mode in ("x", "in_place") else _values((2, h), dtype, "randn")
    w, b = _weight(h, dtype), _values((h,), dtype, "randn")
    ref = _rowwise(op, x, w, b, ref=True)
    if mode == "x":
        y = _rowwise(op, x, w, b)
        assert y.shape == (2, h) and y.is_contiguous()
    elif mode == "out":
        out = big.view
        out.fill_(float("nan"))
        assert _rowwise(op, x, w, b, out=out) is out
        y = out
    else:
        assert _rowwise(op, x, w, b, out=x) is x
        y = x
    _close(y, ref, dtype, SOFTMAX_TOL if op == "softmax" else ROWWISE_TOL)
    assert big.intact()
    assert not torch.isnan(y).any()


# --- norm and softmax: element counts -------------------------------------------------------


@gpu
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "softmax", "fused_add_rms_norm"])
def test_rowwise_rows_times_hidden_past_2_31(op: str) -> None:
    """2**28 + 3 contiguous rows of 8 bf16: row * 8 passes 2**31 from row 2**28 on."""
    import torch

    rows, h = 2**28 + 3, 8
    need(2 * rows * h * 2 + GiB)
    x = torch.randn(rows, h, device="cuda", dtype=torch.bfloat16)
    w, b = _weight(h, "bfloat16"), _values((h,), "bfloat16", "randn")
    pick = torch.tensor([0, 1, 2**28 - 2, 2**28 - 1, 2**28, 2**28 + 1, rows - 1], device="cuda")
    xs = x[pick].clone()
    if op == "fused_add_rms_norm":
        r = torch.randn(rows, h, device="cuda", dtype=torch.bfloat16)
        s = (xs.float() + r[pick].float()).to(torch.bfloat16)
        ak.fused_add_rms_norm(x, r, w)
        assert torch.equal(r[pick], s)
        _close(x[pick], reference.rms_norm(s, w), "bfloat16", ROWWISE_TOL)
        return
    y = _rowwise(op, x, w, b)
    tol = SOFTMAX_TOL if op == "softmax" else ROWWISE_TOL
    _close(y[pick], _rowwise(op, xs, w, b, ref=True), "bfloat16", tol)


@gpu
@pytest.mark.parametrize("op", ["rms_norm", "fused_add_rms_norm", "softmax"])
def test_rowwise_one_row_past_2_31(op: str) -> None:
    """One row of 2**31 + 16 bf16 elements (the multi-pass path, 64-bit chunk offsets). The row
    is constant but for a few marked elements, so the fp64 reference is a closed formula."""
    import torch

    n = BIG + 16
    arrays = {"rms_norm": 3, "fused_add_rms_norm": 3, "softmax": 2}[op]
    need(arrays * n * 2)
    marks = torch.tensor([0, 5, BIG - 3, BIG - 1, BIG, BIG + 1, n - 1], device="cuda")
    if op == "softmax":
        # max 0: every unmarked exp is exactly 1, so the f32 row sum is exact but for the marks
        x = torch.zeros(n, device="cuda", dtype=torch.bfloat16)
        vals = torch.tensor([-1.0, -2.0, -0.5, -3.0, -1.5, -0.25, -4.0], device="cuda")
        x[marks] = vals.to(torch.bfloat16)
        y = ak.softmax(x.view(1, n))
        e = vals.double().exp()
        total = (n - len(vals)) + e.sum()
        assert math.isclose(float(y[0, 1]), 1 / float(total), rel_tol=8e-3)
        _close(y[0, marks], e / total, "bfloat16", {"bfloat16": (8e-3, 1e-13)})
        return
    x = torch.ones(n, device="cuda", dtype=torch.bfloat16)
    vals = torch.tensor([2.0, -3.0, 0.5, 4.0, -2.0, 1.5, 3.0], device="cuda")
    x[marks] = vals.to(torch.bfloat16)
    w = torch.ones(n, device="cuda", dtype=torch.bfloat16)
    w[marks] = torch.tensor([0.5, 2.0, 1.5, 0.75, 1.25, 2.0, 0.5], device="cuda").to(w.dtype)
    if op == "fused_add_rms_norm":
        r = torch.zeros(n, device="cuda", dtype=torch.bfloat16)
        r[marks] = torch.ones(len(vals), device="cuda", dtype=torch.bfloat16)
        vals = vals + 1.0  # x + residual at the marks; 1 + 0 elsewhere
        ak.fused_add_rms_norm(x.view(1, n), r.view(1, n), w)
        assert torch.equal(r[marks].float(), vals) and float(r[7]) == 1.0
        y = x.view(1, n)
    else:
        y = ak.rms_norm(x.view(1, n), w)
    ss = (n - len(vals)) + vals.double().square().sum()
    scale = 1 / (ss / n + 1e-6).sqrt()
    _close(y[0, marks], vals.double() * scale * w[marks].double(), "bfloat16", ROWWISE_TOL)
    _close(y[0, 7:9], scale.expand(2), "bfloat16", ROWWISE_TOL)


# --- activation and gated: row strides, offsets, counts -------------------------------------

ACTIVATIONS = {
    "relu": (lambda x, **kw: ak.relu(x, **kw), "relu"),
    "gelu": (lambda x, **kw: ak.gelu(x, **kw), "gelu"),
    "gelu_tanh": (lambda x, **kw: ak.gelu(x, approximate="tanh", **kw), "gelu_tanh"),
    "silu": (lambda x, **kw: ak.silu(x, **kw), "silu"),
    "sigmoid": (lambda x, **kw: ak.sigmoid(x, **kw), "sigmoid"),
}


@gpu
@pytest.mark.parametrize("stride", [BIG, BIG + 3], ids=["stride2_31", "stride2_31p3"])
@pytest.mark.parametrize("op", list(ACTIVATIONS))
def test_activation_row_strides(op: str, stride: int) -> None:
    """x rows 2**31 (+3: misaligned, scalar path) apart; out= rows 2**31 + 8 apart."""
    import torch

    need(2 * (BIG + 1024) * 2 + 8 * 2**20)
    fn, ref_op = ACTIVATIONS[op]
    xs = Rows(2, 1000, "bfloat16", stride)
    outs = Rows(2, 1000, "bfloat16", BIG + 8, fill="nan")
    ref = reference.activation(ref_op, xs.view)
    tol = reference.tol("bfloat16")
    torch.testing.assert_close(fn(xs.view).float(), ref, **tol)
    for _ in range(2):  # the second call takes the cached plan (torch fast path)
        outs.view.fill_(float("nan"))
        assert fn(xs.view, out=outs.view) is outs.view
        torch.testing.assert_close(outs.view.float(), ref, **tol)
        assert xs.intact() and outs.intact()


@gpu
@pytest.mark.parametrize("op", ["silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"])
def test_gated_row_strides(op: str) -> None:
    """x [2, 2 * 500] rows 2**31 apart, out= [2, 500] rows 2**31 + 8 apart."""
    import torch

    need(2 * (BIG + 1024) * 2)
    xs = Rows(2, 1000, "bfloat16", BIG)
    outs = Rows(2, 500, "bfloat16", BIG + 8, fill="nan")
    kw = {"approximate": "tanh"} if op == "gelu_tanh_and_mul" else {}
    fn = ak.silu_and_mul if op == "silu_and_mul" else ak.gelu_and_mul
    ref = reference.gated(op, xs.view)
    tol = reference.tol("bfloat16")
    torch.testing.assert_close(fn(xs.view, **kw).float(), ref, **tol)
    assert fn(xs.view, out=outs.view, **kw) is outs.view
    torch.testing.assert_close(outs.view.float(), ref, **tol)
    assert xs.intact() and outs.intact()


@gpu
def test_gated_d_past_2_31() -> None:
    """One row of 2 * (2**31 + 8) bf16: the up half starts past 2**31, so does out's tail."""
    import torch

    d = BIG + 8
    need(3 * d * 2)
    x = torch.empty(1, 2 * d, device="cuda", dtype=torch.bfloat16)
    for lo in range(0, 2 * d, 2**28):  # randn in slices: no 16 GiB f32 temporary
        hi = min(2 * d, lo + 2**28)
        x[0, lo:hi] = torch.randn(hi - lo, device="cuda", dtype=torch.bfloat16)
    y = ak.silu_and_mul(x)
    for lo, hi in ((0, 64), (BIG - 64, BIG + 8), (d - 64, d)):
        ref = reference.gated("silu_and_mul", torch.cat([x[:, lo:hi], x[:, d + lo : d + hi]], 1))
        torch.testing.assert_close(y[:, lo:hi].float(), ref, **reference.tol("bfloat16"))


@gpu
def test_storage_offsets_past_2_31() -> None:
    """Views that start 2**31 + 8 elements into their buffer, for one op of each family."""
    import torch

    need((BIG + 2**20) * 2 * 2 + 2 * GiB)  # + the bool temporaries of the NaN check
    buf = torch.empty(BIG + 2**20, device="cuda", dtype=torch.bfloat16)
    x = buf[BIG + 8 : BIG + 8 + 64 * 128].view(64, 128)
    x.copy_(torch.randint(-2, 3, (64, 128), device="cuda").to(torch.bfloat16))
    out_buf = torch.full_like(buf, float("nan"))
    out = out_buf[BIG + 24 : BIG + 24 + 64 * 128].view(64, 128)
    tol = reference.tol("bfloat16")
    torch.testing.assert_close(ak.silu(x, out=out).float(), reference.activation("silu", x), **tol)
    w = _weight(128, "bfloat16")
    _close(ak.rms_norm(x, w, out=out), reference.rms_norm(x, w), "bfloat16", ROWWISE_TOL)
    _close(ak.softmax(x, out=out), reference.softmax(x), "bfloat16", SOFTMAX_TOL)
    b = buf[BIG + 8 + 64 * 128 : BIG + 8 + 64 * 128 + 128 * 64].view(128, 64)
    b.copy_(torch.randint(-2, 3, (128, 64), device="cuda").to(torch.bfloat16))
    assert torch.equal(ak.matmul(x, b), (x.float() @ b.float()).to(torch.bfloat16))
    assert out_buf[: BIG + 24].isnan().all() and out_buf[BIG + 24 + 64 * 128 :].isnan().all()


# --- GEMM ------------------------------------------------------------------------------------

GEMM_PATHS = ["default", "mma_sync"]


@pytest.fixture
def gemm_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    path = str(request.param)
    if path == "default":
        monkeypatch.delenv("AOTKERNELS_GEMM_PATH", raising=False)
    else:
        monkeypatch.setenv("AOTKERNELS_GEMM_PATH", path)
    return path


@gpu
@pytest.mark.parametrize("gemm_path", GEMM_PATHS, indirect=True)
@pytest.mark.parametrize("which", ["a_rows", "a_cols", "b_cols", "b_rows", "out_rows"])
def test_matmul_strides_past_2_31(gemm_path: str, which: str) -> None:
    """One operand (or out=) whose non-unit stride is 2**31 elements: a [2, 64] row-major or
    [16, 2] column-major, b [64, 2] column-major or [2, 48] row-major, out [2, 48]."""
    import torch

    need((BIG + 4096) * 2)
    bf = torch.bfloat16
    m, n, k = {"a_rows": (2, 48, 64), "a_cols": (16, 48, 2), "b_cols": (16, 2, 64),
               "b_rows": (16, 48, 2), "out_rows": (2, 48, 64)}[which]  # fmt: skip
    big = None
    if which == "a_rows":
        big = Rows(m, k, "bfloat16", BIG, fill="ints")
        a = big.view
    elif which == "a_cols":
        big = Rows(k, m, "bfloat16", BIG, fill="ints")
        a = big.view.t()
    else:
        a = _values((m, k), "bfloat16", "ints")
    if which == "b_cols":
        big = Rows(n, k, "bfloat16", BIG, fill="ints")
        b = big.view.t()
    elif which == "b_rows":
        big = Rows(k, n, "bfloat16", BIG, fill="ints")
        b = big.view
    else:
        b = _values((k, n), "bfloat16", "ints")
    ref = reference.rounded_once(reference.exact_product(a, b), bf)
    if which == "out_rows":
        big = Rows(m, n, "bfloat16", BIG, fill="nan")
        assert ak.matmul(a, b, out=big.view) is big.view
        y = big.view
    else:
        y = ak.matmul(a, b)
    assert torch.equal(y, ref)
    assert big is not None and big.intact()


@gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "int8"])
def test_gemm_k_past_2_31(dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """a [1, K] @ b [K, 1] with K = 2**31 + 144 on the default path: both operands K-major and
    16-byte legal, so only their size keeps them off TMA (whose 32-bit coordinates would wrap).
    Zeros but for marked K indices on both sides of 2**31 and in the last K tile: the exact
    result is a short sum. One CTA walks all of K (seconds)."""
    import torch

    monkeypatch.delenv("AOTKERNELS_GEMM_PATH", raising=False)
    k = BIG + 144
    need(2 * k * ITEM[dtype])
    a = torch.zeros(1, k, device="cuda", dtype=_dt(dtype))
    b = torch.zeros(k, 1, device="cuda", dtype=_dt(dtype))
    idx = torch.tensor([0, 1000, BIG - 1, BIG, BIG + 70, k - 2, k - 1], device="cuda")
    av = torch.tensor([1, 2, -1, 2, 1, -2, 1], device="cuda")
    bv = torch.tensor([2, 1, 1, 2, -2, 1, 2], device="cuda")
    a[0, idx] = av.to(a.dtype)
    b[idx, 0] = bv.to(b.dtype)
    expect = float((av * bv).sum())  # 2 + 2 - 1 + 4 - 2 - 2 + 2 = 5
    if dtype == "bfloat16":
        y = ak.matmul(a, b)
    elif dtype == "int8":
        y = ak.scaled_mm(a, b, out_dtype="int32")
    else:
        one = torch.ones(1, device="cuda")
        y = ak.scaled_mm(a, b, one * 0.5, one, out_dtype="float32")
        expect *= 0.5
    assert float(y[0, 0]) == expect


@gpu
def test_gemm_k_past_2_31_refuses_forced_tma(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forcing the TMA path on a K it cannot index is a typed error, not a wrong result."""
    import torch

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the wgmma path runs on sm_90a (Hopper) only")
    k = BIG + 144
    need(2 * k * 2)
    monkeypatch.setenv("AOTKERNELS_GEMM_PATH", "wgmma")
    a = torch.empty(1, k, device="cuda", dtype=torch.bfloat16)
    b = torch.empty(k, 1, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ak.NoKernelImageError, match="AOTKERNELS_GEMM_PATH=wgmma"):
        ak.matmul(a, b)


@gpu
@pytest.mark.parametrize("gemm_path", ["mma_sync"], indirect=True)
def test_matmul_more_than_65535_tile_rows(gemm_path: str) -> None:
    """M = 65535 * 128 + 1 on mma.sync: past what a grid.y of tile rows could hold."""
    import torch

    m, n, k = 65535 * 128 + 1, 8, 16
    need(m * (n + k) * 2 * 2)
    a = _values((m, k), "bfloat16", "ints")
    b = _values((k, n), "bfloat16", "ints")
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert ak.matmul(a, b, out=out) is out
    assert torch.equal(out, reference.rounded_once(reference.exact_product(a, b), torch.bfloat16))


@gpu
@pytest.mark.parametrize("gemm_path", GEMM_PATHS, indirect=True)
def test_matmul_out_elements_past_2_31(gemm_path: str) -> None:
    """out [65544, 32776] bf16: m * ldd passes 2**31 from row 65520 on."""
    import torch

    m, n, k = 65536 + 8, 32768 + 8, 16
    need(m * n * 2)
    a = _values((m, k), "bfloat16", "ints")
    b = _values((k, n), "bfloat16", "ints")
    y = ak.matmul(a, b)
    rows = torch.tensor([0, BIG // n - 1, BIG // n, BIG // n + 1, m - 1], device="cuda")
    want = reference.rounded_once(reference.exact_product(a[rows], b), torch.bfloat16)
    assert torch.equal(y[rows], want)


@gpu
@pytest.mark.parametrize("gemm_path", GEMM_PATHS, indirect=True)
def test_scaled_mm_strides_past_2_31(gemm_path: str) -> None:
    """fp8 a [2, 64] rows 2**31 apart, a per-row scale_a whose stride is 2**31, bf16 out= rows
    2**31 apart."""
    import torch

    need(BIG * (1 + 4 + 2) + 2**24)
    a_rows = Rows(2, 64, "float8_e4m3fn", BIG, fill="ints")
    b = _values((48, 64), "float8_e4m3fn", "ints").t()  # [K, N], K-major
    sbuf = torch.empty(BIG + 1, device="cuda")
    scale_a = sbuf.as_strided((2,), (BIG,))
    scale_a.copy_(torch.tensor([0.5, 2.0], device="cuda"))
    scale_b = torch.full((48,), 0.25, device="cuda")
    out = Rows(2, 48, "bfloat16", BIG, fill="nan")
    a = a_rows.view
    ref = (a.float() @ b.float()) * scale_a[:, None] * scale_b[None, :]
    res = ak.scaled_mm(a, b, scale_a, scale_b, out_dtype="bfloat16", out=out.view)
    assert res is out.view
    assert torch.equal(out.view, ref.to(torch.bfloat16))
    assert a_rows.intact() and out.intact()


# --- CPU: the packed launch parameters ------------------------------------------------------


class OffsetArray(FakeCudaArray):
    """A fake CUDA array whose DLPack capsule gives its start as data + byte_offset."""

    def __init__(self, *args: Any, byte_offset: int = 0, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.byte_offset = byte_offset

    def __dlpack__(self, stream: int | None = None) -> object:
        cap = super().__dlpack__(stream)
        self._keep[-1].dl_tensor.byte_offset = self.byte_offset  # the capsule points at it
        return cap


def test_launch_parameters_carry_64_bit_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """Row strides past 2**31 elements and starts past 2**32 bytes (DLPack byte_offset) reach
    every family's parameter block unchanged (CPU: the launch is captured, not run)."""
    from aotkernels import _core, arrays, device, loader

    families = {
        name: fake_family(name, "sm_90a" if name == "gemm" else "sm_90")
        for name in ("activation", "gated", "norm", "softmax", "gemm")
    }
    dev = families["gemm"].device
    launches: list[dict[str, Any]] = []

    def family_on(name: str, index: int) -> Any:
        return families[name]

    class Plan:
        """Records the decoded parameter block; a call patches the pointers in, as _core does."""

        def __init__(self, symbol: str, *args: Any) -> None:
            params, ptr_offsets = args[5], args[6]
            fam = next(f for f in families.values() if symbol in f.kernels)
            names = [n for n, _ in fam.param_fields]
            self.fields = dict(zip(names, fam.params.unpack(params), strict=True))
            self.fields["symbol"] = symbol
            by_offset = {off: name for name, off in fam.field_offsets.items()}
            self.slots = [by_offset[off] for off in ptr_offsets]

        def __call__(self, stream: int, *ptrs: int) -> None:
            launches.append(dict(self.fields, **dict(zip(self.slots, ptrs, strict=False))))

    monkeypatch.setattr(loader, "family_on", family_on)
    monkeypatch.setattr(device, "device_info", lambda index: dev)
    monkeypatch.setattr(_core, "PreparedLaunch", Plan)

    def empty(self: Any, like: Any, shape: Any, dtype: str) -> FakeCudaArray:
        """matmul's split-K workspace (empty when it does not split): the one allocation here."""
        return FakeCudaArray(tuple(shape), arrays.dtype_name(dtype), ptr=0x1000)

    monkeypatch.setattr(arrays.Framework, "empty", empty)
    base, off = 0x7F00_0000_0000, 2**33 + 32  # starts 8 GiB + 32 B past the capsule's data
    row = BIG + 8  # elements

    def big(cols: int, dtype: str = "bfloat16", at: int = 0) -> OffsetArray:
        return OffsetArray((2, cols), dtype, (row, 1), ptr=base + at, byte_offset=off)

    w = FakeCudaArray((128,), "bfloat16", ptr=0x1000)
    x, out = big(128), big(128, at=2**40)
    ak.rms_norm(x, w, out=out)
    ak.fused_add_rms_norm(x, big(128, at=2**41), w)
    ak.softmax(x, out=out)
    ak.relu(x, out=out)
    ak.silu_and_mul(big(256), out=big(128, at=2**40))
    start = base + off
    assert [f["symbol"] for f in launches] == [
        "ak_rms_norm_bf16", "ak_fused_add_rms_norm_bf16", "ak_softmax_bf16", "ak_relu_bf16",
        "ak_silu_and_mul_bf16",
    ]  # fmt: skip
    for f in launches:
        assert f["x"] == start and f["x_row_stride"] == row, f
        assert f["out"] in (start, start + 2**40) and f["out_row_stride"] == row, f
    assert launches[1]["residual"] == start + 2**41 and launches[1]["residual_row_stride"] == row
    a, o = big(64), big(48, "float32", at=2**40)
    b = OffsetArray((64, 48), "bfloat16", (1, row), ptr=base + 2**42, byte_offset=off)
    ak.matmul(a, b, "float32", out=o)
    g = launches[-1]
    assert (g["a"], g["b"], g["d"]) == (start, start + 2**42, start + 2**40)
    assert (g["lda"], g["ldb"], g["ldd"]) == (row, row, row)
    assert g["symbol"].endswith("_kk")  # both K-major, TMA-legal: strides up to 2**40 bytes
