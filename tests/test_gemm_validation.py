"""gemm validation (CPU): every bad input to matmul and scaled_mm is refused before any load,
allocation or launch with a typed error naming the argument, on fake CUDA arrays: operand
dtypes and pairings, ranks, shapes and batch broadcasting, layouts, out=, out_dtype rules and
spellings (parse_dtype), scales, bias, devices; and the valid calls that pass.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

import aotkernels as ak
from aotkernels.ops import _op
from helpers.fake_dlpack import FakeCudaArray
from helpers.gemm import A_PTR, B_PTR, BIAS_PTR, D_PTR, ENV, SA_PTR, SB_PTR, ab, f32, mat
from helpers.no_launch import Reached, stop_after_validation


@pytest.fixture
def no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    stop_after_validation(monkeypatch, ENV)


BAD_PTR = 0x9000000  # where the one bad operand of a case lives


def _one_bad(
    pair: tuple[FakeCudaArray, FakeCudaArray], arg: str, bad: FakeCudaArray
) -> tuple[FakeCudaArray, FakeCudaArray]:
    """The operands ``pair`` (a, b) with ``arg`` replaced by ``bad``."""
    a, b = pair
    return (bad, b) if arg == "a" else (a, bad)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int32", "float8_e4m3fn"])
def test_matmul_rejects_operand_dtype(no_launch: None, dtype: str) -> None:
    with pytest.raises(
        TypeError, match=rf"matmul: a.dtype must be one of float16, bfloat16, got {dtype}"
    ):
        ak.matmul(*ab(dtype=dtype))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32"])
def test_scaled_mm_rejects_operand_dtype(no_launch: None, dtype: str) -> None:
    with pytest.raises(
        TypeError,
        match=rf"scaled_mm: a.dtype must be one of float8_e4m3fn, float8_e5m2, int8, got {dtype}",
    ):
        ak.scaled_mm(*ab(dtype=dtype), out_dtype="float32")


@pytest.mark.parametrize(
    ("op", "da", "db"),
    [
        ("matmul", "bfloat16", "float16"),
        ("matmul", "float16", "float32"),
        ("scaled_mm", "int8", "float8_e4m3fn"),
    ],
)
def test_rejects_mismatched_dtypes(no_launch: None, op: str, da: str, db: str) -> None:
    a, _ = ab(dtype=da)
    _, b = ab(dtype=db)
    with pytest.raises(TypeError, match=rf"{op}: b.dtype must equal a.dtype \({da}\), got {db}"):
        getattr(ak, op)(a, b, out_dtype="float32")


@pytest.mark.parametrize(("da", "db"), [("float8_e4m3fn", "int8"), ("float8_e5m2", "bfloat16")])
def test_fp8_takes_only_fp8_partners(no_launch: None, da: str, db: str) -> None:
    a, _ = ab(dtype=da, layout="kk")
    _, b = ab(dtype=db, layout="kk")
    with pytest.raises(
        TypeError,
        match=rf"scaled_mm: b.dtype must equal a.dtype \({da}\) or the other fp8 type, got {db}",
    ):
        ak.scaled_mm(a, b, out_dtype="float32")


@pytest.mark.parametrize(
    ("da", "db"), [("float8_e4m3fn", "float8_e5m2"), ("float8_e5m2", "float8_e4m3fn")]
)
def test_mixed_fp8_passes_validation(no_launch: None, da: str, db: str) -> None:
    a, _ = ab(dtype=da, layout="kk")
    _, b = ab(dtype=db, layout="kk")
    with pytest.raises(Reached):
        ak.scaled_mm(a, b, out_dtype="bfloat16")


def test_rejects_shape_mismatch(no_launch: None) -> None:
    a = mat((4, 8), ptr=A_PTR)
    b = mat((9, 5), ptr=B_PTR)
    with pytest.raises(
        ValueError,
        match=r"matmul: b.shape\[0\] must equal a.shape\[1\] \(8\), got b.shape \(9, 5\)",
    ):
        ak.matmul(a, b)
    with pytest.raises(ValueError, match=r"scaled_mm: b.shape\[0\] must equal a.shape\[1\] \(8\)"):
        ak.scaled_mm(mat((4, 8), "int8"), mat((7, 5), "int8", ptr=B_PTR), out_dtype="int32")


@pytest.mark.parametrize(("arg", "shape"), [("a", (8,)), ("a", ()), ("b", (8,)), ("b", ())])
def test_matmul_rejects_under_2d(no_launch: None, arg: str, shape: tuple[int, ...]) -> None:
    dims = "[..., M, K]" if arg == "a" else "[..., K, N]"
    want = re.escape(f"{dims}, got shape {shape}")
    with pytest.raises(ValueError, match=rf"matmul: {arg} must be at least 2-D {want}"):
        ak.matmul(*_one_bad(ab(), arg, FakeCudaArray(shape, "bfloat16", ptr=BAD_PTR)))


@pytest.mark.parametrize(
    ("arg", "shape"), [("a", (2, 4, 8)), ("a", (8,)), ("a", ()), ("b", (8,)), ("b", (1, 8, 5))]
)
def test_scaled_mm_rejects_non_2d(no_launch: None, arg: str, shape: tuple[int, ...]) -> None:
    dims = "[M, K]" if arg == "a" else "[K, N]"
    want = re.escape(f"{dims}, got shape {shape}")
    bad = FakeCudaArray(shape, "int8", ptr=BAD_PTR)
    with pytest.raises(ValueError, match=rf"scaled_mm: {arg} must be 2-D {want}"):
        ak.scaled_mm(*_one_bad(ab(dtype="int8", layout="kk"), arg, bad), out_dtype="int32")


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
    a, b = ab(m=4, n=5)
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
    bad = FakeCudaArray((8, 8) if arg == "b" else (4, 8), "bfloat16", strides, ptr=BAD_PTR)
    with pytest.raises(
        ValueError,
        match=rf"matmul: {arg} must be row- or column-major \(one dimension with stride 1\), got "
        rf"strides {re.escape(str(strides))} .*pass a contiguous copy",
    ):
        ak.matmul(*_one_bad(ab(m=4, n=8, k=8), arg, bad))


@pytest.mark.parametrize("spelling", ["float64", "fp32", "FLOAT32", "", "bfloat", 3, object()])
def test_rejects_bad_out_dtype_spelling(no_launch: None, spelling: Any) -> None:
    with pytest.raises(TypeError, match=r"matmul: out_dtype must be a dtype such as 'float32'"):
        ak.matmul(*ab(), spelling)
    with pytest.raises(TypeError, match=r"scaled_mm: out_dtype must be a dtype such as"):
        ak.scaled_mm(*ab(dtype="int8"), out_dtype=spelling)


@pytest.mark.parametrize("spelling", ["int32", "int8", "float8_e4m3fn", "float8_e5m2"])
def test_matmul_rejects_unsupported_out_dtype(no_launch: None, spelling: str) -> None:
    with pytest.raises(
        TypeError,
        match=rf"matmul: out_dtype for bfloat16 operands must be one of float16, bfloat16, "
        rf"float32, got {spelling}",
    ):
        ak.matmul(*ab(), spelling)


def test_scaled_mm_requires_out_dtype(no_launch: None) -> None:
    with pytest.raises(TypeError, match=r"scaled_mm: out_dtype is required"):
        ak.scaled_mm(*ab(dtype="float8_e4m3fn"))
    with pytest.raises(TypeError, match=r"scaled_mm: out_dtype is required"):
        ak.scaled_mm(*ab(dtype="int8"))


def test_scaled_mm_out_dtype_rules(no_launch: None) -> None:
    sa, sb = f32((1,), SA_PTR), f32((1,), SB_PTR)
    with pytest.raises(
        TypeError,
        match=r"scaled_mm: out_dtype for int8 operands must be one of float16, bfloat16, "
        r"float32, got int32 \(int8 with scales gives f16/bf16/f32\)",
    ):
        ak.scaled_mm(*ab(dtype="int8"), sa, sb, out_dtype="int32")
    with pytest.raises(
        TypeError,
        match=r"scaled_mm: out_dtype for int8 operands without scales must be one of int32, "
        r"got bfloat16",
    ):
        ak.scaled_mm(*ab(dtype="int8"), out_dtype="bfloat16")
    for dt in ("float8_e4m3fn", "float8_e5m2"):
        with pytest.raises(
            TypeError,
            match=rf"scaled_mm: out_dtype for {dt} operands must be one of float16, "
            r"bfloat16, float32, got int32",
        ):
            ak.scaled_mm(*ab(dtype=dt), sa, sb, out_dtype="int32")
        with pytest.raises(TypeError, match=r"got float8_e4m3fn"):
            ak.scaled_mm(*ab(dtype=dt), out_dtype="float8_e4m3fn")


@pytest.mark.parametrize("value", [1, 0, "yes", None, 1.0])
def test_scaled_mm_use_fast_accum_is_a_bool(no_launch: None, value: Any) -> None:
    sa, sb = f32((1,), SA_PTR), f32((1,), SB_PTR)
    with pytest.raises(TypeError, match=r"scaled_mm: use_fast_accum must be a bool, got "):
        ak.scaled_mm(*ab(dtype="float8_e4m3fn"), sa, sb, "bfloat16", use_fast_accum=value)


def test_block_scales_reject_int8(no_launch: None) -> None:
    a, b = ab(m=4, n=300, k=256, dtype="int8", layout="kk")
    with pytest.raises(TypeError, match=r"scaled_mm: block scales take fp8 operands, got int8"):
        ak.scaled_mm(a, b, f32((4, 2), SA_PTR), f32((3, 2), SB_PTR), out_dtype="bfloat16")


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
    a, b = ab(m=4, n=300, k=256, dtype="float8_e4m3fn", layout="kk")
    with pytest.raises(ValueError, match=rf"scaled_mm: {message}"):
        ak.scaled_mm(a, b, f32(sa, SA_PTR), f32(sb, SB_PTR), out_dtype="bfloat16")


def test_rejects_bad_scale_dtype_and_pairing(no_launch: None) -> None:
    a, b = ab(dtype="float8_e4m3fn", layout="kk")
    s = f32((1,), SA_PTR)
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
        ak.scaled_mm(a, b, s, f32((1,), SB_PTR, device=1), out_dtype="float32")


def test_rejects_bad_bias(no_launch: None) -> None:
    a, b = ab(m=4, n=5, dtype="float8_e4m3fn", layout="kk")
    sa, sb = f32((1,), SA_PTR), f32((1,), SB_PTR)
    with pytest.raises(ValueError, match=r"scaled_mm: bias.shape must be \(5,\), got \(6,\)"):
        ak.scaled_mm(a, b, sa, sb, "bfloat16", FakeCudaArray((6,), "bfloat16", ptr=BIAS_PTR))
    with pytest.raises(ValueError, match=r"scaled_mm: bias.shape must be \(5,\), got \(1, 5\)"):
        ak.scaled_mm(a, b, sa, sb, "bfloat16", FakeCudaArray((1, 5), "bfloat16", ptr=BIAS_PTR))
    with pytest.raises(
        TypeError, match=r"scaled_mm: bias.dtype must be one of bfloat16, got float32"
    ):
        ak.scaled_mm(a, b, sa, sb, "bfloat16", f32((5,), BIAS_PTR))
    with pytest.raises(
        TypeError, match=r"scaled_mm: bias.dtype must be one of float32, got float16"
    ):
        ak.scaled_mm(a, b, sa, sb, "float32", FakeCudaArray((5,), "float16", ptr=BIAS_PTR))
    with pytest.raises(
        ValueError, match=r"scaled_mm: bias must be contiguous, got stride 2; pass a contiguous"
    ):
        ak.scaled_mm(a, b, sa, sb, "float32", f32((5,), BIAS_PTR, strides=(2,)))
    ai, bi = ab(m=4, n=5, dtype="int8", layout="kk")
    with pytest.raises(TypeError, match=r"scaled_mm: bias is not supported with an int32 output"):
        ak.scaled_mm(ai, bi, out_dtype="int32", bias=FakeCudaArray((5,), "int32", ptr=BIAS_PTR))


def test_rejects_bad_out(no_launch: None) -> None:
    a, b = ab(m=4, n=5)
    bf = "bfloat16"
    with pytest.raises(ValueError, match=r"matmul: out.shape must be \(4, 5\), got \(5, 4\)"):
        ak.matmul(a, b, out=FakeCudaArray((5, 4), bf, ptr=D_PTR))
    with pytest.raises(TypeError, match=r"matmul: out.dtype must be bfloat16, got float32"):
        ak.matmul(a, b, out=f32((4, 5), D_PTR))
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
    sa, sb = f32((4, 1), SA_PTR), f32((1, 5), SB_PTR)
    fa, fb = ab(m=4, n=5, dtype="float8_e4m3fn", layout="kk")
    with pytest.raises(ValueError, match=r"scaled_mm: out must not overlap scale_b"):
        ak.scaled_mm(fa, fb, sa, sb, "float32", out=f32((4, 5), SB_PTR - 8))
    bias = FakeCudaArray((5,), bf, ptr=BIAS_PTR)
    with pytest.raises(ValueError, match=r"scaled_mm: out must not overlap bias"):
        ak.scaled_mm(fa, fb, sa, sb, bf, bias, out=FakeCudaArray((4, 5), bf, ptr=BIAS_PTR))


def test_rejects_non_arrays_and_other_devices(no_launch: None) -> None:
    a, b = ab()
    with pytest.raises(TypeError, match=r"matmul: b must be a CUDA array .*got builtins.list"):
        ak.matmul(a, [[1.0]])
    with pytest.raises(TypeError, match=r"matmul: a must be a CUDA array .*NoneType"):
        ak.matmul(None, b)
    with pytest.raises(ValueError, match=r"matmul: b must be on the same device as .*cuda:1"):
        ak.matmul(a, mat((8, 5), ptr=B_PTR, device=1))
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
        lambda: ak.matmul(*ab()),
        lambda: ak.matmul(*ab(layout="mk"), "float32"),
        lambda: ak.matmul(*ab(dtype="float16"), out=FakeCudaArray((4, 5), "float16", ptr=D_PTR)),
        lambda: ak.scaled_mm(*ab(dtype="int8"), out_dtype="int32"),
        lambda: ak.scaled_mm(*ab(dtype="int8"), f32((), SA_PTR), f32((1,), SB_PTR), "float16"),
        lambda: ak.scaled_mm(
            *ab(m=4, n=300, k=256, dtype="float8_e5m2"),
            f32((4, 2), SA_PTR),
            f32((3, 2), SB_PTR),
            "bfloat16",
        ),
        lambda: ak.scaled_mm(
            *ab(dtype="float8_e4m3fn"),
            f32((4, 1), SA_PTR),
            f32((1, 5), SB_PTR),
            "float32",
            f32((5,), BIAS_PTR),
        ),
        lambda: ak.scaled_mm(
            *ab(dtype="float8_e4m3fn"),
            f32((1,), SA_PTR),
            f32((1,), SB_PTR),
            "bfloat16",
            use_fast_accum=True,
        ),
    ],
)
def test_valid_calls_pass_validation(no_launch: None, call: Any) -> None:
    """The positive control of the tests above: these go on to the load / allocation."""
    with pytest.raises(Reached):
        call()


# --- parse_dtype ----------------------------------------------------------------------------------


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
