"""gemm family: matmul (f16/bf16) and scaled_mm (fp8 e4m3/e5m2, int8).

CPU: every validation error before any load, allocation or launch (fake CUDA arrays); the tile
table and the packed launch (parameter block, grid, TMA descriptors) through a fake family built
from arch_matrix.toml; parse_dtype spellings.
GPU: exact results from small-integer inputs (products and sums exact in f32, compared with
torch.equal against an fp64 reference rounded once to the output dtype) over odd M/N/K, every
layout, each path forced with AOTKERNELS_GEMM_PATH, K = 0, misaligned and row-strided operands,
strided out=, bias, every out_dtype spelling; fp8 and int8 against torch._scaled_mm /
torch._int_mm; block scales; random inputs within documented tolerances; CuPy and JAX in/out; the
sm_90a image and its default wgmma pick; compute-sanitizer.
"""

from __future__ import annotations

import math
import os
import re
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import pytest

import aotkernels as ak
from aotkernels import arrays, loader
from aotkernels.errors import NoKernelImageError
from aotkernels.ops import _op, gemm
from helpers.fake_dlpack import FakeCudaArray
from helpers.sanitizer import assert_clean, sanitizer_or_skip

ENV = "AOTKERNELS_GEMM_PATH"
PATHS = ["mma_sync", "wgmma"]  # the paths an sm_90a image holds
LAYOUTS = ["kk", "kn", "mk", "mn"]  # a: k row-major, m column-major; b: k column-major, n row-major
SCRIPTS = Path(__file__).parent / "scripts"


# --- CPU: fakes ------------------------------------------------------------------------------


class _Reached(Exception):
    """Validation passed: the op went on to load the family, allocate or launch."""


@pytest.fixture
def no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading, allocating or launching raises _Reached: an expected error that comes later than
    validation would show up as _Reached instead (on a GPU machine too: no fake pointer launches).
    """

    def reached(*args: Any, **kwargs: Any) -> Any:
        raise _Reached

    monkeypatch.setattr(loader, "family_on", reached)
    monkeypatch.setattr(arrays.Framework, "empty", reached)
    monkeypatch.setattr(_op, "_PLANS", {})
    monkeypatch.delenv(ENV, raising=False)


class _Launch(NamedTuple):
    symbol: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    smem: int
    fields: dict[str, Any]  # the parameter block, unpacked by name
    tmaps: list[tuple[int, ...]]
    ptrs: tuple[int, ...]  # per-call pointers (none: the packed ones)


OUT_PTR = 0x7000000  # where the fake allocator puts outputs


class FakeGpu:
    """family_on, the allocator and _core.LaunchPlan replaced: calls run to the launch, which is
    recorded with its decoded parameter block."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from aotkernels import _core
        from aotkernels._paths import matrix_path
        from aotkernels.arch_matrix import load_matrix
        from aotkernels.plan import param_layout

        self.matrix = load_matrix(matrix_path(), check_sources=False)
        self.spec = self.matrix.families["gemm"]
        fmt, _, offsets = param_layout(self.spec.params)
        self.struct = struct.Struct(fmt)
        self.names = [name for name, _ in self.spec.params]
        ptrs = [name for name, ptype in self.spec.params if ptype == "ptr"]
        self.ptr_offsets = [off for name, off in offsets if name in ptrs]
        self.field_offsets = dict(offsets)
        self.launches: list[_Launch] = []
        self.use("sm_90a")
        monkeypatch.setattr(loader, "family_on", lambda name, dev: self.family)
        monkeypatch.setattr(arrays.Framework, "empty", self._empty)
        monkeypatch.setattr(_core, "LaunchPlan", self._plan)
        monkeypatch.setattr(_op, "_PLANS", {})
        for var in (ENV, "AOTKERNELS_GEMM_TCGEN05"):
            monkeypatch.delenv(var, raising=False)

    def use(self, target: str, sm_count: int = 132) -> None:
        from aotkernels.device import DeviceInfo

        tgt = self.matrix.targets[target]
        specs = self.spec.entry_specs(self.matrix.dtypes)
        kernels = {e.symbol: 0x1000 + i for i, e in enumerate(specs) if e.requires <= tgt.features}
        variants = {
            v.name: {"path": v.path, "requires": list(v.requires), **dict(v.constants)}
            for v in self.spec.variants
        }
        self.family = SimpleNamespace(
            device=DeviceInfo(0, "Fake GPU", tgt.cc, sm_count, 0xC0),
            choice=SimpleNamespace(target=target),
            kernels=kernels,
            variants=variants,
            params=self.struct,
            param_fields=[tuple(p) for p in self.spec.params],
            ptr_offsets=self.ptr_offsets,
            field_offsets=self.field_offsets,
        )

    def _empty(self, like: Any, shape: Any, dtype: str) -> Any:
        return FakeCudaArray(shape, arrays.dtype_name(dtype), ptr=OUT_PTR)

    def _plan(
        self, symbol: str, func: int, ctx: int, grid: list[int], block: list[int], smem: int,
        params: bytes, ptr_offsets: list[int], tmaps: Any = (),
    ) -> Any:  # fmt: skip
        assert func == self.family.kernels[symbol] and ctx == 0xC0
        assert ptr_offsets == self.ptr_offsets
        packed = dict(zip(self.names, self.struct.unpack(params), strict=True))
        ptr_names = [name for name, ptype in self.spec.params if ptype == "ptr"]
        rec = self.launches

        class Plan:
            def __call__(self, stream: int, *ptrs: int) -> None:
                # What the kernel receives: the packed block with this call's pointers patched in.
                fields = {**packed, **dict(zip(ptr_names, ptrs, strict=False))}
                rec.append(
                    _Launch(symbol, tuple(grid), tuple(block), smem, fields, list(tmaps), ptrs)
                )

        return Plan()

    @property
    def last(self) -> _Launch:
        """The last GEMM launch (not a split-K reduction after it: flags bit 3)."""
        main = [launch for launch in self.launches if not launch.fields["flags"] & 8]
        assert main, "no launch"
        return main[-1]


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> FakeGpu:
    return FakeGpu(monkeypatch)


def _m(
    shape: tuple[int, ...],
    dtype: str = "bfloat16",
    col_major: bool = False,
    ld: int | None = None,
    ptr: int = 0x100000,
    **kw: Any,
) -> FakeCudaArray:
    """A fake 2-D operand: row-major (or column-major) with leading dimension ``ld``."""
    if len(shape) != 2:
        return FakeCudaArray(shape, dtype, ptr=ptr, **kw)
    r, c = shape
    pitch = ld if ld is not None else (r if col_major else c)
    strides = (1, pitch) if col_major else (pitch, 1)
    return FakeCudaArray(shape, dtype, kw.pop("strides", strides), ptr=ptr, **kw)


A_PTR, B_PTR, SA_PTR, SB_PTR, BIAS_PTR, D_PTR = (0x100000 * i for i in range(1, 7))


def _ab(
    m: int = 4, n: int = 5, k: int = 8, dtype: str = "bfloat16", layout: str = "kn"
) -> tuple[FakeCudaArray, FakeCudaArray]:
    a = _m((m, k), dtype, col_major=layout[0] == "m", ptr=A_PTR)
    b = _m((k, n), dtype, col_major=layout[1] == "k", ptr=B_PTR)
    return a, b


def _f32(shape: tuple[int, ...], ptr: int, **kw: Any) -> FakeCudaArray:
    return FakeCudaArray(shape, "float32", ptr=ptr, **kw)


# --- CPU: validation before any launch -------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int32", "float8_e4m3fn"])
def test_matmul_rejects_operand_dtype(no_launch: None, dtype: str) -> None:
    with pytest.raises(
        TypeError, match=rf"matmul: a.dtype must be one of float16, bfloat16, got {dtype}"
    ):
        ak.matmul(*_ab(dtype=dtype))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32"])
def test_scaled_mm_rejects_operand_dtype(no_launch: None, dtype: str) -> None:
    with pytest.raises(
        TypeError,
        match=rf"scaled_mm: a.dtype must be one of float8_e4m3fn, float8_e5m2, int8, got {dtype}",
    ):
        ak.scaled_mm(*_ab(dtype=dtype), out_dtype="float32")


@pytest.mark.parametrize(
    ("op", "da", "db"),
    [
        ("matmul", "bfloat16", "float16"),
        ("matmul", "float16", "float32"),
        ("scaled_mm", "int8", "float8_e4m3fn"),
    ],
)
def test_rejects_mismatched_dtypes(no_launch: None, op: str, da: str, db: str) -> None:
    a, _ = _ab(dtype=da)
    _, b = _ab(dtype=db)
    with pytest.raises(TypeError, match=rf"{op}: b.dtype must equal a.dtype \({da}\), got {db}"):
        getattr(ak, op)(a, b, out_dtype="float32")


@pytest.mark.parametrize(("da", "db"), [("float8_e4m3fn", "int8"), ("float8_e5m2", "bfloat16")])
def test_fp8_takes_only_fp8_partners(no_launch: None, da: str, db: str) -> None:
    a, _ = _ab(dtype=da, layout="kk")
    _, b = _ab(dtype=db, layout="kk")
    with pytest.raises(
        TypeError,
        match=rf"scaled_mm: b.dtype must equal a.dtype \({da}\) or the other fp8 type, got {db}",
    ):
        ak.scaled_mm(a, b, out_dtype="float32")


@pytest.mark.parametrize(
    ("da", "db"), [("float8_e4m3fn", "float8_e5m2"), ("float8_e5m2", "float8_e4m3fn")]
)
def test_mixed_fp8_passes_validation(no_launch: None, da: str, db: str) -> None:
    a, _ = _ab(dtype=da, layout="kk")
    _, b = _ab(dtype=db, layout="kk")
    with pytest.raises(_Reached):
        ak.scaled_mm(a, b, out_dtype="bfloat16")


def test_rejects_shape_mismatch(no_launch: None) -> None:
    a = _m((4, 8), ptr=A_PTR)
    b = _m((9, 5), ptr=B_PTR)
    with pytest.raises(
        ValueError,
        match=r"matmul: b.shape\[0\] must equal a.shape\[1\] \(8\), got b.shape \(9, 5\)",
    ):
        ak.matmul(a, b)
    with pytest.raises(ValueError, match=r"scaled_mm: b.shape\[0\] must equal a.shape\[1\] \(8\)"):
        ak.scaled_mm(_m((4, 8), "int8"), _m((7, 5), "int8", ptr=B_PTR), out_dtype="int32")


@pytest.mark.parametrize(("arg", "shape"), [("a", (8,)), ("a", ()), ("b", (8,)), ("b", ())])
def test_matmul_rejects_under_2d(no_launch: None, arg: str, shape: tuple[int, ...]) -> None:
    a, b = _ab()
    bad = FakeCudaArray(shape, "bfloat16", ptr=0x9000000)
    want = "[..., M, K]" if arg == "a" else "[..., K, N]"
    with pytest.raises(
        ValueError,
        match=rf"matmul: {arg} must be at least 2-D {re.escape(want)}, got shape "
        + re.escape(str(shape)),
    ):
        ak.matmul(bad if arg == "a" else a, bad if arg == "b" else b)


@pytest.mark.parametrize(
    ("arg", "shape"), [("a", (2, 4, 8)), ("a", (8,)), ("a", ()), ("b", (8,)), ("b", (1, 8, 5))]
)
def test_scaled_mm_rejects_non_2d(no_launch: None, arg: str, shape: tuple[int, ...]) -> None:
    a, b = _ab(dtype="int8", layout="kk")
    bad = FakeCudaArray(shape, "int8", ptr=0x9000000)
    want = "[M, K]" if arg == "a" else "[K, N]"
    with pytest.raises(
        ValueError,
        match=rf"scaled_mm: {arg} must be 2-D {re.escape(want)}, got shape "
        + re.escape(str(shape)),
    ):
        ak.scaled_mm(bad if arg == "a" else a, bad if arg == "b" else b, out_dtype="int32")


def test_matmul_rejects_unbroadcastable_batches(no_launch: None) -> None:
    a = FakeCudaArray((3, 4, 8), "bfloat16", ptr=A_PTR)
    b = FakeCudaArray((2, 8, 5), "bfloat16", ptr=B_PTR)
    with pytest.raises(
        ValueError,
        match=r"matmul: the batch dims of a \(3,\) and b \(2,\) must broadcast \(equal or 1\), "
        r"got 3 against 2",
    ):
        ak.matmul(a, b)
    with pytest.raises(
        ValueError, match=r"matmul: b.shape\[-2\] must equal a.shape\[-1\] \(8\), got b.shape"
    ):
        ak.matmul(a, FakeCudaArray((3, 7, 5), "bfloat16", ptr=B_PTR))


def test_matmul_rejects_bad_bias(no_launch: None) -> None:
    a, b = _ab(m=4, n=5)
    with pytest.raises(ValueError, match=r"matmul: bias.shape must be \(5,\), got \(4,\)"):
        ak.matmul(a, b, bias=FakeCudaArray((4,), "bfloat16", ptr=BIAS_PTR))
    with pytest.raises(TypeError, match=r"matmul: bias.dtype must be one of float32, got bfloat16"):
        ak.matmul(a, b, "float32", bias=FakeCudaArray((5,), "bfloat16", ptr=BIAS_PTR))


def test_matmul_rejects_self_overlapping_batched_out(no_launch: None) -> None:
    a = FakeCudaArray((3, 4, 8), "bfloat16", ptr=A_PTR)
    b = FakeCudaArray((8, 5), "bfloat16", ptr=B_PTR)
    out = FakeCudaArray((3, 4, 5), "bfloat16", (10, 5, 1), ptr=D_PTR)
    with pytest.raises(ValueError, match=r"matmul: out must not overlap itself, got strides"):
        ak.matmul(a, b, out=out)


@pytest.mark.parametrize("arg", ["a", "b"])
@pytest.mark.parametrize("strides", [(16, 2), (2, 16), (0, 0), (24, 3)])
def test_rejects_neither_row_nor_column_major(
    no_launch: None, arg: str, strides: tuple[int, int]
) -> None:
    a, b = _ab(m=4, n=8, k=8)
    bad = FakeCudaArray((8, 8) if arg == "b" else (4, 8), "bfloat16", strides, ptr=0x9000000)
    with pytest.raises(
        ValueError,
        match=rf"matmul: {arg} must be row- or column-major \(one dimension with stride 1\), got "
        rf"strides {re.escape(str(strides))} .*pass a contiguous copy",
    ):
        ak.matmul(bad if arg == "a" else a, bad if arg == "b" else b)


@pytest.mark.parametrize("spelling", ["float64", "fp32", "FLOAT32", "", "bfloat", 3, object()])
def test_rejects_bad_out_dtype_spelling(no_launch: None, spelling: Any) -> None:
    with pytest.raises(TypeError, match=r"matmul: out_dtype must be a dtype such as 'float32'"):
        ak.matmul(*_ab(), spelling)
    with pytest.raises(TypeError, match=r"scaled_mm: out_dtype must be a dtype such as"):
        ak.scaled_mm(*_ab(dtype="int8"), out_dtype=spelling)


@pytest.mark.parametrize("spelling", ["int32", "int8", "float8_e4m3fn", "float8_e5m2"])
def test_matmul_rejects_unsupported_out_dtype(no_launch: None, spelling: str) -> None:
    with pytest.raises(
        TypeError,
        match=rf"matmul: out_dtype for bfloat16 operands must be one of float16, bfloat16, "
        rf"float32, got {spelling}",
    ):
        ak.matmul(*_ab(), spelling)


def test_scaled_mm_requires_out_dtype(no_launch: None) -> None:
    with pytest.raises(TypeError, match=r"scaled_mm: out_dtype is required"):
        ak.scaled_mm(*_ab(dtype="float8_e4m3fn"))
    with pytest.raises(TypeError, match=r"scaled_mm: out_dtype is required"):
        ak.scaled_mm(*_ab(dtype="int8"))


def test_scaled_mm_out_dtype_rules(no_launch: None) -> None:
    sa, sb = _f32((1,), SA_PTR), _f32((1,), SB_PTR)
    with pytest.raises(
        TypeError,
        match=r"scaled_mm: out_dtype for int8 operands must be one of float16, bfloat16, "
        r"float32, got int32 \(int8 with scales gives f16/bf16/f32\)",
    ):
        ak.scaled_mm(*_ab(dtype="int8"), sa, sb, out_dtype="int32")
    with pytest.raises(
        TypeError,
        match=r"scaled_mm: out_dtype for int8 operands without scales must be one of int32, "
        r"got bfloat16",
    ):
        ak.scaled_mm(*_ab(dtype="int8"), out_dtype="bfloat16")
    for dt in ("float8_e4m3fn", "float8_e5m2"):
        with pytest.raises(
            TypeError,
            match=rf"scaled_mm: out_dtype for {dt} operands must be one of float16, "
            r"bfloat16, float32, got int32",
        ):
            ak.scaled_mm(*_ab(dtype=dt), sa, sb, out_dtype="int32")
        with pytest.raises(TypeError, match=r"got float8_e4m3fn"):
            ak.scaled_mm(*_ab(dtype=dt), out_dtype="float8_e4m3fn")


def test_block_scales_reject_int8(no_launch: None) -> None:
    a, b = _ab(m=4, n=300, k=256, dtype="int8", layout="kk")
    with pytest.raises(TypeError, match=r"scaled_mm: block scales take fp8 operands, got int8"):
        ak.scaled_mm(a, b, _f32((4, 2), SA_PTR), _f32((3, 2), SB_PTR), out_dtype="bfloat16")


@pytest.mark.parametrize(
    ("sa", "sb", "message"),
    [
        ((5,), (1,), r"scale_a.shape must be \(1,\), \(4,\), \(4, 1\) or \(4, 2\) \(1x128 "
         r"blocks\), got \(5,\)"),
        ((1, 4), (1,), r"scale_a.shape must be .*got \(1, 4\)"),
        ((2,), (1,), r"scale_a.shape must be .*got \(2,\)"),
        ((4, 3), (3, 2), r"scale_a.shape must be .*got \(4, 3\)"),
        ((1,), (301,), r"scale_b.shape must be \(1,\), \(300,\), \(1, 300\) or \(3, 2\) \(128x128 "
         r"blocks\), got \(301,\)"),
        ((1,), (300, 1), r"scale_b.shape must be .*got \(300, 1\)"),
        ((1,), (2, 2), r"scale_b.shape must be .*got \(2, 2\)"),
        ((4, 2), (300,), r"block scales need both scale_a \(4, 2\) and scale_b \(3, 2\), got "
         r"\(4, 2\) and \(300,\)"),
        ((4,), (3, 2), r"block scales need both .*got \(4,\) and \(3, 2\)"),
    ],
)  # fmt: skip
def test_rejects_bad_scale_shapes(
    no_launch: None, sa: tuple[int, ...], sb: tuple[int, ...], message: str
) -> None:
    a, b = _ab(m=4, n=300, k=256, dtype="float8_e4m3fn", layout="kk")
    with pytest.raises(ValueError, match=rf"scaled_mm: {message}"):
        ak.scaled_mm(a, b, _f32(sa, SA_PTR), _f32(sb, SB_PTR), out_dtype="bfloat16")


def test_rejects_bad_scale_dtype_and_pairing(no_launch: None) -> None:
    a, b = _ab(dtype="float8_e4m3fn", layout="kk")
    s = _f32((1,), SA_PTR)
    with pytest.raises(ValueError, match=r"scaled_mm: scale_a and scale_b must be given together"):
        ak.scaled_mm(a, b, s, out_dtype="bfloat16")
    with pytest.raises(ValueError, match=r"scaled_mm: scale_a and scale_b must be given together"):
        ak.scaled_mm(a, b, None, s, out_dtype="bfloat16")
    bf = FakeCudaArray((1,), "bfloat16", ptr=SB_PTR)
    with pytest.raises(TypeError, match=r"scaled_mm: scale_b.dtype must be one of float32, got "):
        ak.scaled_mm(a, b, s, bf, out_dtype="bfloat16")
    with pytest.raises(TypeError, match=r"scaled_mm: scale_a.dtype must be one of float32, got "):
        ak.scaled_mm(a, b, FakeCudaArray((1,), "float64", ptr=SA_PTR), s, out_dtype="float32")
    with pytest.raises(ValueError, match=r"scaled_mm: scale_b must be on the same device"):
        ak.scaled_mm(a, b, s, _f32((1,), SB_PTR, device=1), out_dtype="float32")


def test_rejects_bad_bias(no_launch: None) -> None:
    a, b = _ab(m=4, n=5, dtype="float8_e4m3fn", layout="kk")
    sa, sb = _f32((1,), SA_PTR), _f32((1,), SB_PTR)
    with pytest.raises(ValueError, match=r"scaled_mm: bias.shape must be \(5,\), got \(6,\)"):
        ak.scaled_mm(a, b, sa, sb, "bfloat16", FakeCudaArray((6,), "bfloat16", ptr=BIAS_PTR))
    with pytest.raises(ValueError, match=r"scaled_mm: bias.shape must be \(5,\), got \(1, 5\)"):
        ak.scaled_mm(a, b, sa, sb, "bfloat16", FakeCudaArray((1, 5), "bfloat16", ptr=BIAS_PTR))
    with pytest.raises(
        TypeError, match=r"scaled_mm: bias.dtype must be one of bfloat16, got float32"
    ):
        ak.scaled_mm(a, b, sa, sb, "bfloat16", _f32((5,), BIAS_PTR))
    with pytest.raises(
        TypeError, match=r"scaled_mm: bias.dtype must be one of float32, got float16"
    ):
        ak.scaled_mm(a, b, sa, sb, "float32", FakeCudaArray((5,), "float16", ptr=BIAS_PTR))
    with pytest.raises(
        ValueError, match=r"scaled_mm: bias must be contiguous, got stride 2; pass a contiguous"
    ):
        ak.scaled_mm(a, b, sa, sb, "float32", _f32((5,), BIAS_PTR, strides=(2,)))
    ai, bi = _ab(m=4, n=5, dtype="int8", layout="kk")
    with pytest.raises(TypeError, match=r"scaled_mm: bias is not supported with an int32 output"):
        ak.scaled_mm(ai, bi, out_dtype="int32", bias=FakeCudaArray((5,), "int32", ptr=BIAS_PTR))


def test_rejects_bad_out(no_launch: None) -> None:
    a, b = _ab(m=4, n=5)
    bf = "bfloat16"
    with pytest.raises(ValueError, match=r"matmul: out.shape must be \(4, 5\), got \(5, 4\)"):
        ak.matmul(a, b, out=FakeCudaArray((5, 4), bf, ptr=D_PTR))
    with pytest.raises(TypeError, match=r"matmul: out.dtype must be bfloat16, got float32"):
        ak.matmul(a, b, out=_f32((4, 5), D_PTR))
    with pytest.raises(TypeError, match=r"matmul: out.dtype must be float32, got bfloat16"):
        ak.matmul(a, b, "float32", out=FakeCudaArray((4, 5), bf, ptr=D_PTR))
    with pytest.raises(
        ValueError,
        match=r"matmul: out must be row-major \(unit stride along N\), got strides "
        r"\(1, 4\)",
    ):
        ak.matmul(a, b, out=FakeCudaArray((4, 5), bf, (1, 4), ptr=D_PTR))
    with pytest.raises(
        ValueError,
        match=r"matmul: out must not overlap itself, got strides \(3, 1\) for shape \(4, 5\)",
    ):
        ak.matmul(a, b, out=FakeCudaArray((4, 5), bf, (3, 1), ptr=D_PTR))
    with pytest.raises(ValueError, match=r"matmul: out must not overlap b"):
        ak.matmul(a, b, out=FakeCudaArray((4, 5), bf, ptr=B_PTR + 2))
    with pytest.raises(ValueError, match=r"matmul: out must not overlap a"):
        ak.matmul(a, b, out=FakeCudaArray((4, 5), bf, (16, 1), ptr=A_PTR + 2))
    with pytest.raises(ValueError, match=r"matmul: out must be on the same device"):
        ak.matmul(a, b, out=FakeCudaArray((4, 5), bf, ptr=D_PTR, device=1))
    sa, sb = _f32((4, 1), SA_PTR), _f32((1, 5), SB_PTR)
    fa, fb = _ab(m=4, n=5, dtype="float8_e4m3fn", layout="kk")
    with pytest.raises(ValueError, match=r"scaled_mm: out must not overlap scale_b"):
        ak.scaled_mm(fa, fb, sa, sb, "float32", out=_f32((4, 5), SB_PTR - 8))
    bias = FakeCudaArray((5,), bf, ptr=BIAS_PTR)
    with pytest.raises(ValueError, match=r"scaled_mm: out must not overlap bias"):
        ak.scaled_mm(fa, fb, sa, sb, bf, bias, out=FakeCudaArray((4, 5), bf, ptr=BIAS_PTR))


def test_rejects_non_arrays_and_other_devices(no_launch: None) -> None:
    a, b = _ab()
    with pytest.raises(TypeError, match=r"matmul: b must be a CUDA array .*got builtins.list"):
        ak.matmul(a, [[1.0]])
    with pytest.raises(TypeError, match=r"matmul: a must be a CUDA array .*NoneType"):
        ak.matmul(None, b)
    with pytest.raises(ValueError, match=r"matmul: b must be on the same device as .*cuda:1"):
        ak.matmul(a, _m((8, 5), ptr=B_PTR, device=1))
    np = pytest.importorskip("numpy")
    with pytest.raises(ValueError, match=r"matmul: a must be on a CUDA device, got .*cpu"):
        ak.matmul(np.ones((4, 8), np.float16), b)
    with pytest.raises(TypeError, match=r"stream must be an int handle"):
        ak.matmul(a, b, stream="fast")


def test_immutable_arrays_take_no_out(no_launch: None) -> None:
    jax_like = type("Array", (FakeCudaArray,), {"__module__": "jax._fake"})
    a = jax_like((4, 8), "bfloat16", ptr=A_PTR)
    b = jax_like((8, 5), "bfloat16", ptr=B_PTR)
    with pytest.raises(TypeError, match=r"matmul: out= is not supported for jax arrays"):
        ak.matmul(a, b, out=jax_like((4, 5), "bfloat16", ptr=D_PTR))


@pytest.mark.parametrize(
    "call",
    [
        lambda: ak.matmul(*_ab()),
        lambda: ak.matmul(*_ab(layout="mk"), "float32"),
        lambda: ak.matmul(*_ab(dtype="float16"), out=FakeCudaArray((4, 5), "float16", ptr=D_PTR)),
        lambda: ak.scaled_mm(*_ab(dtype="int8"), out_dtype="int32"),
        lambda: ak.scaled_mm(*_ab(dtype="int8"), _f32((), SA_PTR), _f32((1,), SB_PTR), "float16"),
        lambda: ak.scaled_mm(
            *_ab(m=4, n=300, k=256, dtype="float8_e5m2"),
            _f32((4, 2), SA_PTR),
            _f32((3, 2), SB_PTR),
            "bfloat16",
        ),
        lambda: ak.scaled_mm(
            *_ab(dtype="float8_e4m3fn"),
            _f32((4, 1), SA_PTR),
            _f32((1, 5), SB_PTR),
            "float32",
            _f32((5,), BIAS_PTR),
        ),
    ],
)
def test_valid_calls_pass_validation(no_launch: None, call: Any) -> None:
    """The positive control of the tests above: these go on to the load / allocation."""
    with pytest.raises(_Reached):
        call()


# --- CPU: tile table and packed launches (fake sm_90a / sm_80 / sm_100a family) ---------------


def _bf16(m: int, n: int, k: int, layout: str = "kn", ld_a: int | None = None,
          a_off: int = 0) -> tuple[FakeCudaArray, FakeCudaArray]:  # fmt: skip
    a = _m((m, k), col_major=layout[0] == "m", ld=ld_a, ptr=A_PTR + a_off)
    b = _m((k, n), col_major=layout[1] == "k", ptr=B_PTR)
    return a, b


@pytest.mark.parametrize(
    ("m", "n", "k", "layout", "ld_a", "a_off", "symbol", "grid"),
    [
        (4096, 4096, 4096, "kn", None, 0, "ak_matmul_bf16_wg_128x256_kn", (132, 1, 1)),
        (4096, 4096, 4096, "mk", None, 0, "ak_matmul_bf16_wg_128x256_mk", (132, 1, 1)),
        (8192, 1024, 512, "kk", None, 0, "ak_matmul_bf16_wg_128x256_kk", (132, 1, 1)),
        (64, 4096, 4096, "mn", None, 0, "ak_matmul_bf16_wg_64x128_mn", (64, 1, 1)),  # 2 splits
        (512, 512, 512, "kn", None, 0, "ak_matmul_bf16_wg_64x128_kn", (32, 1, 1)),  # few tiles
        (4096, 4096, 4095, "kn", None, 0, "ak_matmul_bf16_mma_128x128", (1024, 1, 1)),  # lda odd
        (4096, 4096, 4096, "kn", 4100, 0, "ak_matmul_bf16_mma_128x128", (1024, 1, 1)),  # lda%8
        (4096, 4096, 4096, "kn", None, 2, "ak_matmul_bf16_mma_128x128", (1024, 1, 1)),  # a+2 B
        (100, 100, 64, "kn", None, 2, "ak_matmul_bf16_mma_64x64", (4, 1, 1)),
        (1000, 1000, 0, "kn", None, 0, "ak_matmul_bf16_mma_64x64", (256, 1, 1)),  # K = 0
        (7, 4096, 4096, "mk", 8, 0, "ak_matmul_bf16_wg_64x128_mk", (64, 1, 1)),
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
        ("float8_e4m3fn", "kk", "ak_scaled_mm_fp8_e4m3_wg_128x256_kk"),
        ("float8_e5m2", "kk", "ak_scaled_mm_fp8_e5m2_wg_128x256_kk"),
        ("int8", "kk", "ak_scaled_mm_int8_wg_128x256_kk"),
        ("float8_e4m3fn", "kn", "ak_scaled_mm_fp8_e4m3_mma_128x128"),  # 8-bit wgmma: kk only
        ("int8", "mk", "ak_scaled_mm_int8_mma_128x128"),
        ("float8_e5m2", "mn", "ak_scaled_mm_fp8_e5m2_mma_128x128"),
    ],
)
def test_pick_sm90a_8bit(fake_gpu: FakeGpu, dtype: str, layout: str, symbol: str) -> None:
    out = "int32" if dtype == "int8" else "bfloat16"
    ak.scaled_mm(*_ab(4096, 4096, 4096, dtype, layout), out_dtype=out)
    assert fake_gpu.last.symbol == symbol


def test_pick_forced_paths(fake_gpu: FakeGpu, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "mma_sync")
    ak.matmul(*_bf16(4096, 4096, 4096))
    assert fake_gpu.last.symbol == "ak_matmul_bf16_mma_128x128" and not fake_gpu.last.tmaps
    ak.matmul(*_bf16(100, 100, 64))
    assert fake_gpu.last.symbol == "ak_matmul_bf16_mma_64x64"
    monkeypatch.setenv(ENV, "wgmma")
    ak.matmul(*_bf16(128, 128, 64))
    assert fake_gpu.last.symbol == "ak_matmul_bf16_wg_64x128_kn"
    n = len(fake_gpu.launches)
    for args in (_bf16(4096, 4096, 4095), _bf16(64, 64, 64, a_off=2), _bf16(64, 64, 0)):
        with pytest.raises(
            NoKernelImageError,
            match=r"matmul: AOTKERNELS_GEMM_PATH=wgmma has no bfloat16 kernel for this call "
            r"\(device 0 \(Fake GPU, cc 9.0\) runs image sm_90a; the wgmma path needs TMA-legal",
        ):
            ak.matmul(*args)
    with pytest.raises(NoKernelImageError, match=r"AOTKERNELS_GEMM_PATH=wgmma has no float8"):
        ak.scaled_mm(*_ab(64, 64, 64, "float8_e4m3fn", "kn"), out_dtype="float32")
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
    ak.scaled_mm(*_ab(64, 64, 64, "int8", "kk"), out_dtype="int32")
    assert fake_gpu.last.symbol == "ak_scaled_mm_int8_mma_64x64"
    with pytest.raises(
        NoKernelImageError,
        match=r"scaled_mm: no float8_e4m3fn GEMM kernel for device 0 \(Fake GPU, cc 8.0\) runs "
        r"image sm_80; .*fp8: sm_89\+",
    ):
        ak.scaled_mm(*_ab(64, 64, 64, "float8_e4m3fn", "kk"), out_dtype="float32")
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
        a = _m((m, k), col_major=layout[0] == "m", ld=104 if layout[0] == "k" else 304, ptr=A_PTR)
        b = _m((k, n), col_major=layout[1] == "k", ld=104 if layout[1] == "k" else None, ptr=B_PTR)
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
    """TMA descriptors as the brief fixes them: inner dim = the unit-stride dim, 128-byte boxes,
    box_outer bm / bn for K-major operands and BK = k_bytes / itemsize otherwise."""
    m, n, k = 4096, 2048, 1024
    ak.matmul(*_bf16(m, n, k, "kn"))  # 128x256 tiles, bf16: BK = 64
    a_map, b_map, d_map = fake_gpu.last.tmaps
    assert a_map == (128, 1, 9, k, m, 2 * k, 64, 128)
    assert b_map == (256, 2, 9, n, k, 2 * n, 64, 64)
    assert d_map == (384, 0, 9, n, m, 2 * n, 64, 64)  # the TMA-store epilogue's 64 x 64 boxes
    assert fake_gpu.last.fields["flags"] & 16
    ak.matmul(*_bf16(m, n, k, "mk"))
    a_map, b_map, _ = fake_gpu.last.tmaps
    assert a_map == (128, 1, 9, m, k, 2 * m, 64, 64)
    assert b_map == (256, 2, 9, k, n, 2 * k, 64, 256)
    fa, fb = _ab(m, n, k, "float8_e4m3fn", "kk")
    ak.scaled_mm(fa, fb, out_dtype="float16")
    a_map, b_map, _ = fake_gpu.last.tmaps
    assert a_map == (128, 1, 0, k, m, k, 128, 128)
    assert b_map == (256, 2, 0, k, n, k, 128, 256)
    assert fake_gpu.last.fields["out_dtype"] == 1


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
    a, b = _ab(300, 200, 1000, "float8_e4m3fn", "kk")
    scale_a = _f32(sa[0], SA_PTR, strides=sa[1])
    scale_b = _f32(sb[0], SB_PTR, strides=sb[1])
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
        a, b = _ab(300, 100, 128, dtype, "kk")
        ak.scaled_mm(a, b, _f32((300, 1), SA_PTR), _f32((1, 1), SB_PTR), "float32")
        f = fake_gpu.last.fields
        assert (f["scale_mode_a"], f["scale_mode_b"]) == (2, 1)


def test_int8_int32_launch(fake_gpu: FakeGpu) -> None:
    ak.scaled_mm(*_ab(64, 64, 64, "int8", "kk"), out_dtype="int32")
    f = fake_gpu.last.fields
    assert (f["out_dtype"], f["scale_mode_a"], f["scale_mode_b"], f["flags"]) == (3, 0, 0, 2)


def test_empty_outputs_launch_nothing(fake_gpu: FakeGpu) -> None:
    for m, n in ((0, 5), (4, 0), (0, 0)):
        y = ak.matmul(*_bf16(m, n, 8))
        assert y.shape == (m, n) and y.dtype == "bfloat16"
        y = ak.scaled_mm(*_ab(m, n, 8, "int8"), out_dtype="int32")
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
    assert a_map[3:5] == (k, 2 * m + m)  # K-major a: rows of the next matrices
    assert b_map[3:5] == (n, 2 * k + k)  # N-major b: K rows (K % 64 == 0: no partial stage)
    tiles = bsz * 5 * 2  # 64 x 128 tiles
    assert launch.grid == (tiles, 1, 1)


def test_batched_broadcast_b_folds_into_m(fake_gpu: FakeGpu) -> None:
    """[B, M, K] @ [K, N] with a's matrices back to back is one GEMM of B * M rows."""
    y = ak.matmul(_batched((4, 3, 50, 64)), _m((64, 96), ptr=B_PTR))
    assert y.shape == (4, 3, 50, 96)
    f = fake_gpu.last.fields
    assert (f["m"], f["batch"], f["a_bs"], f["b_bs"], f["d_bs"]) == (600, 1, 0, 0, 0)


def test_batched_broadcast_a_and_stride_zero(fake_gpu: FakeGpu) -> None:
    a = _m((40, 64), ptr=A_PTR)
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
        ("sm_90a", "float8_e4m3fn", "float8_e5m2", "ak_scaled_mm_fp8_e4m3xfp8_e5m2_wg_64x128_kk"),
        ("sm_90a", "float8_e5m2", "float8_e4m3fn", "ak_scaled_mm_fp8_e5m2xfp8_e4m3_wg_64x128_kk"),
        ("sm_89", "float8_e4m3fn", "float8_e5m2", "ak_scaled_mm_fp8_e4m3xfp8_e5m2_mma_64x64"),
        ("sm_120a", "float8_e5m2", "float8_e4m3fn", "ak_scaled_mm_fp8_e5m2xfp8_e4m3_mma_64x64"),
    ],
)
def test_mixed_fp8_entries(fake_gpu: FakeGpu, target: str, da: str, db: str, symbol: str) -> None:
    fake_gpu.use(target)
    a, _ = _ab(128, 128, 128, da, "kk")
    _, b = _ab(128, 128, 128, db, "kk")
    ak.scaled_mm(a, b, _f32((1,), SA_PTR), _f32((1,), SB_PTR), "bfloat16")
    assert fake_gpu.last.symbol == symbol
    a_map, b_map = (fake_gpu.last.tmaps or [(0,) * 8, (0,) * 8])[:2]
    assert target != "sm_90a" or (a_map[2], b_map[2]) == (0, 0)  # fp8 moves as bytes


def test_mixed_fp8_needs_ada(fake_gpu: FakeGpu) -> None:
    fake_gpu.use("sm_80")
    a, _ = _ab(64, 64, 64, "float8_e4m3fn", "kk")
    _, b = _ab(64, 64, 64, "float8_e5m2", "kk")
    with pytest.raises(
        NoKernelImageError, match=r"scaled_mm: no float8_e4m3fn x float8_e5m2 GEMM kernel"
    ):
        ak.scaled_mm(a, b, out_dtype="float32")


# --- CPU: parse_dtype ---------------------------------------------------------------------------


STRING_SPELLINGS = {
    "float32": "f32", "f32": "f32", "float": "f32", "torch.float32": "f32",
    "float16": "f16", "f16": "f16", "half": "f16", "torch.float16": "f16",
    "bfloat16": "bf16", "bf16": "bf16", "torch.bfloat16": "bf16", "jnp.bfloat16": "bf16",
    "int32": "int32", "int": "int32", "int8": "int8",
    "float8_e4m3fn": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2", "fp8_e5m2": "fp8_e5m2",
}  # fmt: skip


def _spellings() -> Iterator[tuple[Any, str]]:
    yield from STRING_SPELLINGS.items()
    np = pytest.importorskip("numpy")
    for name, ours in (("float32", "f32"), ("float16", "f16"), ("int32", "int32"),
                       ("int8", "int8")):  # fmt: skip
        yield np.dtype(name), ours
    try:
        import ml_dtypes
    except ImportError:
        pass
    else:
        for name, ours in (("bfloat16", "bf16"), ("float8_e4m3fn", "fp8_e4m3"),
                           ("float8_e5m2", "fp8_e5m2")):  # fmt: skip
            yield np.dtype(getattr(ml_dtypes, name)), ours
    try:
        import torch
    except ImportError:
        pass
    else:
        yield from ((torch.float32, "f32"), (torch.float, "f32"), (torch.float16, "f16"),
                    (torch.half, "f16"), (torch.bfloat16, "bf16"), (torch.int32, "int32"),
                    (torch.int8, "int8"), (torch.float8_e4m3fn, "fp8_e4m3"),
                    (torch.float8_e5m2, "fp8_e5m2"))  # fmt: skip


def test_parse_dtype_spellings() -> None:
    seen = 0
    for value, ours in _spellings():
        assert _op.parse_dtype("matmul", "out_dtype", value) == ours, value
        seen += 1
    assert seen >= len(STRING_SPELLINGS) + 4


def test_parse_dtype_scalar_types() -> None:
    """NumPy / ml_dtypes / JAX scalar types (np.float32 itself, not np.dtype(np.float32)) are
    dtype spellings too: np.zeros(3, np.float32) takes them."""
    np = pytest.importorskip("numpy")
    types: list[tuple[Any, str]] = [(np.float32, "f32"), (np.float16, "f16"), (np.int32, "int32")]
    for mod, name, ours in (("ml_dtypes", "bfloat16", "bf16"), ("jax.numpy", "bfloat16", "bf16"),
                            ("jax.numpy", "float32", "f32")):  # fmt: skip
        try:
            module = __import__(mod, fromlist=["_"])
        except ImportError:
            continue
        types.append((getattr(module, name), ours))
    for value, ours in types:
        assert _op.parse_dtype("matmul", "out_dtype", value) == ours, value


@pytest.mark.parametrize(
    "value", ["float64", "fp32", "FLOAT32", "Float16", "", "bfloat", "torch.float64", 3, None, 2.5]
)
def test_parse_dtype_rejects(value: Any) -> None:
    with pytest.raises(
        TypeError,
        match=r"scaled_mm: out_dtype must be a dtype such as 'float32', 'bfloat16' or "
        rf"torch.float16, got {re.escape(repr(value))}",
    ):
        _op.parse_dtype("scaled_mm", "out_dtype", value)


def test_parse_dtype_rejects_foreign_dtypes() -> None:
    np = pytest.importorskip("numpy")
    for value in (np.dtype("float64"), np.dtype("uint8"), np.dtype("complex64")):
        with pytest.raises(TypeError, match=r"matmul: out_dtype must be a dtype such as"):
            _op.parse_dtype("matmul", "out_dtype", value)


# --- GPU: helpers -------------------------------------------------------------------------------

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


def _ids(shapes: Sequence[tuple[int, ...]]) -> list[str]:
    return ["x".join(map(str, s)) for s in shapes]


def _t(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _gen(*key: int) -> Any:
    import torch

    return torch.Generator(device="cuda").manual_seed(hash(key) & 0x7FFFFFFF)


def _ints(shape: tuple[int, ...], dtype: str, gen: Any, lo: int = -3, hi: int = 3) -> Any:
    """Small integers, exact in every operand dtype (e5m2 holds 0..4 exactly)."""
    import torch

    t = torch.randint(lo, hi + 1, shape, device="cuda", generator=gen, dtype=torch.int32)
    return t.to(torch.int8) if dtype == "int8" else t.to(torch.float32).to(_t(dtype))


def _pow2(shape: tuple[int, ...], gen: Any, lo: int = -2, hi: int = 2) -> Any:
    """float32 powers of two in [2**lo, 2**hi]: scaling an exact sum by them stays exact."""
    import torch

    e = torch.randint(lo, hi + 1, shape, device="cuda", generator=gen, dtype=torch.int32)
    return torch.pow(2.0, e.to(torch.float32))


def _poisoned(shape: tuple[int, int], dtype: Any) -> Any:
    """A buffer whose every element would show if a kernel read or left it: NaN (127 for int8)."""
    import torch

    if dtype == torch.int8:
        return torch.full(shape, 127, device="cuda", dtype=torch.int8)
    return torch.full(shape, float("nan"), device="cuda").to(dtype)


def _place(vals: Any, col_major: bool, ld: str = "dense") -> Any:
    """``vals`` [R, C] copied into a row-major (or column-major) view of a poisoned buffer.

    ld "dense": leading dim = the unit-stride extent (odd sizes: rows not 16-byte aligned);
    "tma": rounded up to 16 bytes (TMA-legal); "wide": 16 more bytes on top (stride > cols).
    """
    rows, cols = vals.shape
    inner, outer = (rows, cols) if col_major else (cols, rows)
    step = 16 // vals.element_size()
    pitch = {
        "dense": inner,
        "tma": -(-max(inner, 1) // step) * step,
        "wide": -(-inner // step) * step + step,
    }[ld]
    buf = _poisoned((outer, pitch), vals.dtype)
    view = buf[:, :inner]
    view.copy_(vals.t() if col_major else vals)
    return view.t() if col_major else view


def _operands(m: int, n: int, k: int, dtype: str, layout: str, ld: str,
              gen: Any) -> tuple[Any, Any, Any, Any]:  # fmt: skip
    """(a, b, a values, b values): small integers laid out as ``layout`` says."""
    av, bv = _ints((m, k), dtype, gen), _ints((k, n), dtype, gen)
    return _place(av, layout[0] == "m", ld), _place(bv, layout[1] == "k", ld), av, bv


def _exact(a: Any, b: Any) -> Any:
    """a @ b in float64 on the device: exact for the small integers here."""
    return a.float().double() @ b.float().double()


def _rounded(ref: Any, dtype: Any) -> Any:
    """An exact fp64 result rounded once to ``dtype`` (through f32, where it is exact)."""
    import torch

    return ref.to(torch.int32) if dtype == torch.int32 else ref.float().to(dtype)


def _scaled_ref(av: Any, bv: Any, sa: Any, sb: Any, bias: Any = None) -> Any:
    """fp64 (a @ b) * scales (+ bias); block scales applied per 128-wide K block."""
    import torch

    m, k = av.shape
    n = bv.shape[1]
    kb, nb = math.ceil(k / 128), math.ceil(n / 128)
    block = sa is not None and sa.dim() == 2 and sa.shape[1] == kb
    if block and tuple(sb.shape) == (nb, kb) and nb * kb > 1:  # else: plain scales mean the same
        ref = torch.zeros(m, n, device="cuda", dtype=torch.float64)
        for j in range(kb):
            ks = slice(j * 128, min(k, j * 128 + 128))
            col = sb[:, j].double().repeat_interleave(128)[:n]
            ref += _exact(av[:, ks], bv[ks]) * sa[:, j : j + 1].double() * col
    else:
        ref = _exact(av, bv)
        if sa is not None:
            ref = ref * (sa.double().reshape(-1, 1) if sa.numel() > 1 else sa.double().reshape(()))
            ref = ref * (sb.double().reshape(1, -1) if sb.numel() > 1 else sb.double().reshape(()))
    if bias is not None:
        ref = ref + bias.double()
    return ref


# (accumulation error bound relative to sum_k |a||b|, output rounding relative to |ref|) for
# random inputs. f16/bf16: f32 accumulation of up to 4097 products, K * 2**-24 ~ 2**-12 at worst.
# fp8: Hopper's fp8 tensor-core accumulation keeps ~14 bits unless the kernel promotes, so 2**-9
# (a wrong element or scale shifts results by ~ 1/sqrt(K) of that sum: far above either bound).
# Output rounding: one ulp of the output dtype (a tie may go either way against the f32 sum).
ACC_BOUND = {"float16": 2**-12, "bfloat16": 2**-12, "float8_e4m3fn": 2**-9,
             "float8_e5m2": 2**-9, "int8": 0.0}  # fmt: skip
OUT_ULP = {"float32": 2**-23, "float16": 2**-10, "bfloat16": 2**-7}


def _assert_near(y: Any, ref: Any, absref: Any, in_dtype: str) -> None:
    """|y - ref| <= ulp(out) * |ref| + ACC_BOUND * (|a| @ |b| scaled); and a non-zero result."""
    err = (y.double() - ref).abs()
    bound = OUT_ULP[str(y.dtype).removeprefix("torch.")] * ref.abs() + ACC_BOUND[in_dtype] * absref
    worst = (err - bound).max().item()
    assert worst <= 0, f"error exceeds the bound by {worst:g} (max err {err.max().item():g})"
    assert y.double().norm() > 0 and ref.norm() > 0


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


def _need_sm90a() -> None:
    import torch

    if torch.cuda.get_device_capability(0) != (9, 0):
        pytest.skip("the wgmma path runs on sm_90 (H100/H200) only")


def _run_forced(path: str, call: Any, degenerate: bool) -> Any:
    """``call()`` under a forced path; wgmma may decline operands with a size-1 dim (its layout
    reading then sees no 16-byte row stride): NoKernelImageError, which returns None."""
    if path == "wgmma":
        _need_sm90a()
        if degenerate:
            try:
                return call()
            except NoKernelImageError:
                return None
    return call()


# --- GPU: the image and the default pick --------------------------------------------------------


@pytest.mark.gpu
def test_sm90a_image_picks_wgmma(picks: list[Any]) -> None:
    import torch

    _need_sm90a()
    fam = loader.family_on("gemm", 0)
    assert fam.binary_version == 90 and fam.choice.target == "sm_90a"
    gen = _gen(4096)
    for layout in LAYOUTS:
        a, b, av, bv = _operands(4096, 4096, 4096, "bfloat16", layout, "dense", gen)
        y = ak.matmul(a, b)
        assert picks[-1].symbol == f"ak_matmul_bf16_wg_128x256_{layout}", picks[-1]
        assert torch.equal(y, _rounded(_exact(av, bv), torch.bfloat16))
    a, b, av, bv = _operands(4096, 4096, 4096, "float8_e4m3fn", "kk", "dense", gen)
    y = ak.scaled_mm(a, b, out_dtype=torch.bfloat16)
    assert picks[-1].symbol == "ak_scaled_mm_fp8_e4m3_wg_128x256_kk"
    assert torch.equal(y, _rounded(_exact(av, bv), torch.bfloat16))


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

    _need_sm90a()
    monkeypatch.setattr(_op, "_PLANS", {})
    monkeypatch.delenv(ENV, raising=False)
    a = torch.ones(64, 63, device="cuda", dtype=torch.bfloat16)
    b = torch.ones(63, 64, device="cuda", dtype=torch.bfloat16)
    ak.matmul(a, b)  # mma_sync (K * 2 bytes is no multiple of 16), cached
    monkeypatch.setenv(ENV, "wgmma")
    with pytest.raises(NoKernelImageError):
        ak.matmul(a, b)


# --- GPU: matmul -------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES, ids=_ids(SHAPES))
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
    a, b, av, bv = _operands(m, n, k, dtype, layout, "tma" if path == "wgmma" else "dense",
                             _gen(m, n, k))  # fmt: skip
    y = _run_forced(path, lambda: ak.matmul(a, b), 1 in shape)
    if y is None:
        return
    assert type(y) is torch.Tensor and y.shape == (m, n) and y.dtype == _t(dtype)
    assert y.is_contiguous()
    assert torch.equal(y, _rounded(_exact(av, bv), _t(dtype)))
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
        return _t(name)
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
    a, b, av, bv = _operands(m, n, k, dtype, "kn", "tma", _gen(m, n, k, 1))
    y = _run_forced(path, lambda: ak.matmul(a, b, _spell(kind, out)), False)
    ref = _rounded(_exact(av, bv), _t(out))
    assert y.dtype == _t(out) and torch.equal(y, ref)
    assert picks[-1].path == path
    res = torch.empty(m, n, device="cuda", dtype=_t(out))
    assert ak.matmul(a, b, out, out=res) is res and torch.equal(res, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "shape",
    [(127, 1000, 4097), (1000, 1000, 1000), (4097, 127, 257)],
    ids=_ids([(127, 1000, 4097), (1000, 1000, 1000), (4097, 127, 257)]),
)
@pytest.mark.parametrize("path", PATHS)
def test_matmul_random_within_tolerance(
    picks: list[Any], monkeypatch: pytest.MonkeyPatch, path: str, shape: tuple[int, int, int],
    dtype: str,
) -> None:  # fmt: skip
    import torch

    m, n, k = shape
    monkeypatch.setenv(ENV, path)
    gen = _gen(m, n, k, 2)
    av = torch.randn(m, k, device="cuda", generator=gen).to(_t(dtype))
    bv = torch.randn(k, n, device="cuda", generator=gen).to(_t(dtype))
    a, b = _place(av, False, "tma"), _place(bv, True, "tma")
    ref = _exact(av, bv)
    absref = _exact(av.abs(), bv.abs())
    for out in ("float32", dtype):
        y = _run_forced(path, partial(ak.matmul, a, b, out), False)
        _assert_near(y, ref, absref, dtype)
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
    gen = _gen(m, n, k, 3)
    av, bv = _ints((m, k), dtype, gen), _ints((k, n), dtype, gen)
    a, b = av, bv.t().contiguous().t()  # kk: TMA-legal for every dtype
    out = None
    if case == "a_offset1":
        a = torch.empty(m * k + 1, device="cuda", dtype=av.dtype)[1:].view(m, k)
    elif case == "b_offset1":
        b = torch.empty(n * k + 1, device="cuda", dtype=av.dtype)[1:].view(n, k).t()
    elif case == "a_slice":
        a = _poisoned((m, k + 1), av.dtype)[:, 1:]
    elif case == "b_slice":
        b = _poisoned((n, k + 1), av.dtype)[:, 1:].t()
    elif case == "odd_ld":
        a = _poisoned((m, k + 3), av.dtype)[:, :k]
    else:
        out = torch.full((m * n + 1,), float("nan"), device="cuda")[1:].view(m, n)
    a.copy_(av)
    b.copy_(bv)
    ref = _rounded(_exact(av, bv), torch.float32)
    call: Callable[[], Any] = (
        partial(ak.matmul, a, b, "float32", out=out)
        if dtype == "bfloat16"
        else partial(ak.scaled_mm, a, b, out_dtype="float32", out=out)
    )
    if path == "wgmma" and case != "out_offset1":
        _need_sm90a()
        with pytest.raises(NoKernelImageError, match="AOTKERNELS_GEMM_PATH=wgmma"):
            call()
        return
    y = _run_forced(path or "", call, False)
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
    gen = _gen(m, n, k, 4)
    av, bv = _ints((m, k), "bfloat16", gen), _ints((k, n), "bfloat16", gen)
    a, b = _place(av, layout[0] == "m", "wide"), _place(bv, layout[1] == "k", "wide")
    base = torch.full((m, n + 24), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = base[:, :n]
    y = _run_forced(path, lambda: ak.matmul(a, b, out=out), False)
    assert y is out and torch.equal(out, _rounded(_exact(av, bv), torch.bfloat16))
    assert base[:, n:].isnan().all()
    assert picks[-1].path == path


# --- GPU: scaled_mm -----------------------------------------------------------------------------

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
        return _pow2((1,), gen), _pow2((), gen)
    if kind == "vector":
        return _pow2((m, 1), gen), _pow2((n,), gen)
    kb = math.ceil(k / 128)
    sb = _pow2((math.ceil(n / 128), kb), gen, -1, 1).t().contiguous().t()  # any strides
    return _pow2((m, kb), gen, -1, 1), sb


# int8 takes no block scales (a CPU test checks the TypeError).
DTYPE_KINDS = [(d, kind) for d in [*FP8, "int8"] for kind in SCALE_KINDS
               if not (d == "int8" and kind == "block")]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SCALED_SHAPES, ids=_ids(SCALED_SHAPES))
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
    gen = _gen(m, n, k, 5)
    a, b, av, bv = _operands(m, n, k, dtype, layout, "tma" if path == "wgmma" else "dense", gen)
    sa, sb = _scales(kind, m, n, k, gen)
    out = "int32" if dtype == "int8" and kind == "none" else SCALE_KINDS[kind]

    def call() -> Any:
        return ak.scaled_mm(a, b, sa, sb, out)

    if path == "wgmma" and layout != "kk":
        _need_sm90a()
        with pytest.raises(NoKernelImageError, match="AOTKERNELS_GEMM_PATH=wgmma"):
            call()
        return
    y = _run_forced(path, call, 1 in shape)
    if y is None:
        return
    assert y.shape == (m, n) and y.dtype == _t(out)
    assert torch.equal(y, _rounded(_scaled_ref(av, bv, sa, sb), _t(out)))
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
    gen = _gen(m, n, k, 6)
    a, b, av, bv = _operands(m, n, k, dtype, "kk", "tma", gen)
    sa, sb = _pow2((m,), gen), _pow2((1, n), gen)
    bias = _ints((n,), "float32", gen, -50, 50).to(_t(out))
    ref = _rounded(_scaled_ref(av, bv, sa, sb, bias), _t(out))
    y = _run_forced(path, lambda: ak.scaled_mm(a, b, sa, sb, out, bias), False)
    assert torch.equal(y, ref)
    base = torch.full((m, n + 8), float("nan"), device="cuda", dtype=_t(out))
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
@pytest.mark.parametrize("shape", TORCH_FP8_SHAPES, ids=_ids(TORCH_FP8_SHAPES))
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
    gen = _gen(m, n, k, 7)
    a, b, av, bv = _operands(m, n, k, "float8_e4m3fn", "kk", "dense", gen)
    if kind == "tensor":
        sa, sb = _pow2((), gen), _pow2((), gen)
    else:
        sa, sb = _pow2((m, 1), gen), _pow2((1, n), gen)
    y = _run_forced(path, lambda: ak.scaled_mm(a, b, sa, sb, out), m == 1)
    if y is None:
        return
    assert torch.equal(y, _rounded(_scaled_ref(av, bv, sa, sb), _t(out)))
    assert picks[-1].path == path
    ra = torch.randn(m, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    rb = torch.randn(n, k, device="cuda", generator=gen).to(torch.float8_e4m3fn).t()
    rs_a, rs_b = sa * 0.37, sb * 1.3  # not powers of two
    mine = ak.scaled_mm(ra, rb, rs_a, rs_b, out)
    ref = _scaled_ref(ra, rb, rs_a, rs_b)
    absref = _scaled_ref(ra.float().abs(), rb.float().abs(), rs_a, rs_b).abs()
    _assert_near(mine, ref, absref, "float8_e4m3fn")
    theirs = _torch_scaled_mm(ra, rb, rs_a, rs_b, _t(out))
    err = (mine.double() - theirs.double()).abs()
    assert (err <= 2 * (OUT_ULP[out] * ref.abs() + ACC_BOUND["float8_e4m3fn"] * absref)).all()
    assert torch.equal(ak.scaled_mm(a, b, sa, sb, out), _torch_scaled_mm(a, b, sa, sb, _t(out)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize("block", [False, True])
@pytest.mark.parametrize("path", PATHS)
def test_fp8_random_within_tolerance(
    picks: list[Any], monkeypatch: pytest.MonkeyPatch, path: str, block: bool, dtype: str
) -> None:
    """Random fp8 (e5m2 too, which torch._scaled_mm does not multiply by itself) against the
    upcast reference, per-tensor and block scales (an fp32 reference applying them per block)."""
    import torch

    monkeypatch.setenv(ENV, path)
    for m, n, k in ((127, 1000, 4097), (4097, 257, 300)):
        gen = _gen(m, n, k, 8)
        av = (torch.randn(m, k, device="cuda", generator=gen) * 4).to(_t(dtype))
        bv = (torch.randn(n, k, device="cuda", generator=gen) * 4).to(_t(dtype)).t()
        a, b = _place(av, False, "tma"), _place(bv, True, "tma")
        if block:
            kb = math.ceil(k / 128)
            sa = torch.rand(m, kb, device="cuda", generator=gen) + 0.1
            sb = torch.rand(math.ceil(n / 128), kb, device="cuda", generator=gen) + 0.1
        else:
            sa, sb = torch.tensor([0.3], device="cuda"), torch.tensor([1.7], device="cuda")
        y = _run_forced(path, partial(ak.scaled_mm, a, b, sa, sb, "float32"), False)
        absref = _scaled_ref(av.float().abs(), bv.float().abs(), sa, sb).abs()
        _assert_near(y, _scaled_ref(av, bv, sa, sb), absref, dtype)
        assert picks[-1].path == path


INT_MM_SHAPES = [(17, 8, 16), (127, 1000, 4096), (4097, 256, 1008)]  # M > 16, K and N % 8 == 0


@pytest.mark.gpu
@pytest.mark.parametrize("shape", INT_MM_SHAPES, ids=_ids(INT_MM_SHAPES))
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
    gen = _gen(m, n, k, 9)
    av = torch.randint(-128, 128, (m, k), device="cuda", generator=gen, dtype=torch.int8)
    bv = torch.randint(-128, 128, (k, n), device="cuda", generator=gen, dtype=torch.int8)
    a, b = av, _place(bv, layout[1] == "k")
    if path == "wgmma" and layout != "kk":
        _need_sm90a()
        with pytest.raises(NoKernelImageError):
            ak.scaled_mm(a, b, out_dtype="int32")
        return
    y = _run_forced(path, lambda: ak.scaled_mm(a, b, out_dtype=torch.int32), False)
    assert y.dtype == torch.int32
    assert torch.equal(y, torch._int_mm(av, bv))
    assert torch.equal(y.long(), _exact(av, bv).long())
    assert picks[-1].path == path


@pytest.mark.gpu
def test_runs_on_the_callers_stream() -> None:
    import torch

    gen = _gen(11)
    av, bv = _ints((1000, 1000), "bfloat16", gen), _ints((1000, 1000), "bfloat16", gen)
    ref = _rounded(_exact(av, bv), torch.bfloat16)
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        y = ak.matmul(av, bv)
        z = ak.matmul(av, bv, stream=s.cuda_stream)
    s.synchronize()
    assert torch.equal(y, ref) and torch.equal(z, ref)


# --- GPU: other frameworks ----------------------------------------------------------------------


def _np_ref(a: Any, b: Any) -> Any:
    return a.astype("float64") @ b.astype("float64")


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
    ref = _np_ref(ah, bh)
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
    ref = _np_ref(ah, bh)
    assert np.array_equal(np.asarray(y.astype(jnp.float32)), np.asarray(
        jnp.asarray(ref.astype(np.float32), jnp.bfloat16).astype(jnp.float32)))  # fmt: skip
    z = ak.matmul(a, b, jnp.float32)
    assert z.dtype == jnp.float32 and np.array_equal(np.asarray(z), ref.astype(np.float32))


# --- GPU: compute-sanitizer ---------------------------------------------------------------------


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


# --- GPU: bias, batches, mixed fp8 ----------------------------------------------------------------


def _batch_case(case: str, dtype: str, gen: Any) -> tuple[Any, Any]:
    """(a, b) of small integers for a named batched layout (sizes multiples of 8: TMA-legal)."""

    def ints(*shape: int) -> Any:
        return _ints(shape, dtype, gen)

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
        _need_sm90a()
    a, b = _batch_case(case, dtype, _gen(len(case), 11))
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
    assert y.shape == ref.shape and y.dtype == _t(dtype)
    assert torch.equal(y, ref.float().to(_t(dtype)))
    out = _poisoned((y.numel(), 1), _t(dtype)).view(y.shape)
    assert ak.matmul(a, b, out=out) is out and torch.equal(out, y)


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 1000])
def test_batched_matmul_random_vs_bmm(batch: int) -> None:
    import torch

    gen = _gen(batch, 12)
    a = torch.randn(batch, 64, 128, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(batch, 128, 96, device="cuda", generator=gen).to(torch.bfloat16)
    y = ak.matmul(a, b)
    ref = torch.matmul(a.double(), b.double())
    absref = torch.matmul(a.double().abs(), b.double().abs())
    _assert_near(y, ref, absref, "bfloat16")
    theirs = torch.bmm(a, b)
    bound = 2 * (OUT_ULP["bfloat16"] * ref.abs() + ACC_BOUND["bfloat16"] * absref)
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
        _need_sm90a()
    *lead, m, n, k = shape
    odt = _t(dtype) if out == "same" else torch.float32
    gen = _gen(*shape, 13)
    a, b = _ints((*lead, m, k), dtype, gen), _ints((k, n), dtype, gen)
    bias = _ints((n,), "float16", gen, -8, 8).to(odt)
    try:
        y = ak.matmul(a, b, None if out == "same" else odt, bias=bias)
    except NoKernelImageError:
        assert path == "wgmma" and 65 in shape  # odd rows are not TMA-legal
        return
    ref = torch.matmul(a.double(), b.double()) + bias.double()
    assert y.dtype == odt and torch.equal(y, ref.float().to(odt))
    if not lead:
        ra = torch.randn(m, k, device="cuda", generator=gen).to(_t(dtype))
        w = torch.randn(n, k, device="cuda", generator=gen).to(_t(dtype))
        rbias = torch.randn(n, device="cuda", generator=gen).to(_t(dtype))
        mine = ak.matmul(ra, w.t(), bias=rbias)
        ref = ra.double() @ w.double().t() + rbias.double()
        absref = ra.double().abs() @ w.double().abs().t() + rbias.double().abs()
        _assert_near(mine, ref, absref, dtype)
        bound = 2 * (OUT_ULP[dtype] * ref.abs() + ACC_BOUND[dtype] * absref)
        for theirs in (F.linear(ra, w, rbias), torch.addmm(rbias, ra, w.t())):
            assert ((mine.double() - theirs.double()).abs() <= bound).all()


MIXED = [("float8_e4m3fn", "float8_e5m2"), ("float8_e5m2", "float8_e4m3fn")]


@pytest.mark.gpu
@pytest.mark.parametrize(("da", "db"), MIXED)
@pytest.mark.parametrize("path", [None, *PATHS])
@pytest.mark.parametrize(
    "shape", MIXED_SHAPES := [(7, 33, 65), (256, 512, 1024), (1, 16, 16)], ids=_ids(MIXED_SHAPES)
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
        _need_sm90a()
    m, n, k = shape
    gen = _gen(m, n, k, 14)
    av, bv = _ints((m, k), da, gen), _ints((n, k), db, gen).t()
    sa, sb = _pow2((), gen), _pow2((), gen)
    try:
        y = ak.scaled_mm(av, bv, sa, sb, "bfloat16")
    except NoKernelImageError:
        assert path == "wgmma" and (65 in shape or m == 1)  # not TMA-legal (see _run_forced)
        return
    assert torch.equal(y, _rounded(_scaled_ref(av, bv, sa, sb), torch.bfloat16))
    ra = torch.randn(m, k, device="cuda", generator=gen).to(_t(da))
    rb = torch.randn(n, k, device="cuda", generator=gen).to(_t(db)).t()
    rs_a, rs_b = sa * 0.37, sb * 1.3
    mine = ak.scaled_mm(ra, rb, rs_a, rs_b, "float32")
    ref = _scaled_ref(ra, rb, rs_a, rs_b)
    absref = _scaled_ref(ra.float().abs(), rb.float().abs(), rs_a, rs_b).abs()
    _assert_near(mine, ref, absref, "float8_e4m3fn")
    if path is None and m % 16 == 0 and n % 16 == 0 and k % 16 == 0:
        theirs = _torch_scaled_mm(ra, rb, rs_a, rs_b, torch.float32)
        err = (mine.double() - theirs.double()).abs()
        assert (err <= 2 * (OUT_ULP["float32"] * ref.abs() + ACC_BOUND[da] * absref)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("path", PATHS)
def test_batch_strides_past_2_pow_31(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """a's and out's second matrices 2**31 elements on: 64-bit batch offsets on both paths."""
    import torch

    if path == "wgmma":
        _need_sm90a()
    need = 2 * (2**31 + 2**20) * 2
    free, _ = torch.cuda.mem_get_info()
    if free < need + 2**30:
        pytest.skip(f"needs {need / 2**30:.1f} GiB of free GPU memory, {free / 2**30:.1f} free")
    monkeypatch.setenv(ENV, path)
    m, n, k = 64, 128, 128
    gen = _gen(m, n, k, 15)
    abuf = torch.zeros(2**31 + m * k, dtype=torch.bfloat16, device="cuda")
    a = torch.as_strided(abuf, (2, m, k), (2**31, k, 1))
    a.copy_(_ints((2, m, k), "bfloat16", gen))
    b = _ints((2, k, n), "bfloat16", gen)
    obuf = torch.full((2**31 + m * n,), float("nan"), dtype=torch.bfloat16, device="cuda")
    out = torch.as_strided(obuf, (2, m, n), (2**31, n, 1))
    ak.matmul(a, b, out=out)
    ref = torch.matmul(a.double(), b.double()).float().to(torch.bfloat16)
    assert torch.equal(out, ref)
    assert bool(obuf[m * n : 2**31].isnan().all())  # nothing written between the matrices
