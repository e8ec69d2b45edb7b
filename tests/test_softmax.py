"""softmax family: softmax over the last dimension.

CPU: validation before any launch (dtype, dim, layouts, out=). GPU: every dtype against the fp64
torch reference over rows {1, 19, 99, 989, 16384} x hidden sizes that hit every path, strided
and misaligned rows, all -inf rows (0, our safe-softmax contract), NaN rows, empty inputs, out=
and bitwise repeatability.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

import aotkernels as ak
from aotkernels.ops.softmax import softmax
from conftest import gpu_missing
from helpers import reference
from helpers.fake_dlpack import FakeCudaArray

DTYPES = ["float32", "float16", "bfloat16"]

# (rtol, atol) against fp64 torch.softmax of the same (rounded) inputs; outputs lie in [0, 1].
TOLERANCES = reference.FAMILY_TOLERANCES["softmax"]
tol = partial(reference.tol, table=TOLERANCES)


# --- CPU: validation ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "int8", "int32"])
def test_rejects_unclaimed_dtype(dtype: str) -> None:
    with pytest.raises(
        TypeError, match=rf"softmax: x.dtype must be one of float32, float16, bfloat16, got {dtype}"
    ):
        softmax(FakeCudaArray((4, 8), dtype))


@pytest.mark.parametrize(("shape", "dim"), [((4, 8), 0), ((4, 8), -2), ((2, 3, 4), 1)])
def test_non_last_dim_not_implemented(shape: tuple[int, ...], dim: int) -> None:
    with pytest.raises(
        NotImplementedError, match=rf"softmax: dim must be the last dimension .*got dim={dim}"
    ):
        softmax(FakeCudaArray(shape), dim=dim)


@pytest.mark.parametrize(("shape", "dim"), [((4, 8), 2), ((4, 8), -3), ((), 1), ((5,), -2)])
def test_dim_out_of_range(shape: tuple[int, ...], dim: int) -> None:
    with pytest.raises(ValueError, match=r"softmax: dim must be in \[-\d+, \d+\] for shape"):
        softmax(FakeCudaArray(shape), dim=dim)


@pytest.mark.parametrize("dim", ["-1", 1.0, None, True])
def test_dim_type(dim: Any) -> None:
    with pytest.raises(TypeError, match=r"softmax: dim must be an int, got"):
        softmax(FakeCudaArray((4, 8)), dim=dim)


@pytest.mark.parametrize(
    ("shape", "dim"), [((4, 8), 1), ((4, 8), -1), ((8,), 0), ((), 0), ((), -1)]
)
def test_last_dim_positive_control(shape: tuple[int, ...], dim: int) -> None:
    """Every spelling of the last dim passes validation; it fails only at the launch that
    needs a driver (or at the output allocation, on this machine)."""
    if gpu_missing() is None:
        pytest.skip("a real GPU would launch on the fake pointers")
    with pytest.raises(ak.AotKernelsError):
        softmax(FakeCudaArray(shape), dim=dim)


def test_rejects_bad_layouts_and_args() -> None:
    with pytest.raises(ValueError, match=r"softmax: x must have a contiguous last dimension"):
        softmax(FakeCudaArray((8, 4), strides=(1, 8)))
    with pytest.raises(ValueError, match=r"softmax: x's leading dimensions must collapse"):
        softmax(FakeCudaArray((2, 3, 4), strides=(100, 5, 1)))
    with pytest.raises(TypeError, match=r"softmax: x must be a CUDA array .* got builtins.list"):
        softmax([1.0, 2.0])
    np = pytest.importorskip("numpy")
    with pytest.raises(ValueError, match=r"softmax: x must be on a CUDA device, got .*cpu"):
        softmax(np.ones(4, np.float32))
    with pytest.raises(TypeError, match=r"stream must be an int handle"):
        softmax(FakeCudaArray((4,)), stream="fast")


def test_out_checked() -> None:
    x = FakeCudaArray((4, 8))
    with pytest.raises(ValueError, match=r"softmax: out.shape must be \(4, 8\), got \(4, 9\)"):
        softmax(x, out=FakeCudaArray((4, 9), ptr=0x90000))
    with pytest.raises(TypeError, match=r"softmax: out.dtype must be float32, got bfloat16"):
        softmax(x, out=FakeCudaArray((4, 8), "bfloat16", ptr=0x90000))
    with pytest.raises(ValueError, match=r"softmax: out must be on the same device as x"):
        softmax(x, out=FakeCudaArray((4, 8), device=1, ptr=0x90000))
    with pytest.raises(ValueError, match=r"softmax: out must not overlap itself"):
        softmax(x, out=FakeCudaArray((4, 8), strides=(0, 1), ptr=0x90000))
    with pytest.raises(ValueError, match=r"softmax: out must not partially overlap x"):
        softmax(x, out=FakeCudaArray((4, 8), ptr=x.ptr + 64))
    with pytest.raises(ValueError, match=r"softmax: out must not partially overlap x"):
        softmax(x, out=FakeCudaArray((4, 8), strides=(9, 1), ptr=x.ptr))


# --- GPU ------------------------------------------------------------------------------------

ROWS = [1, 19, 99, 989, 16384]
HIDDEN = [1, 46, 111, 392, 1024, 3584, 4096, 8192, 16384, 40000, 65536]
SHAPES = [(r, h) for r in ROWS for h in HIDDEN if r * h <= 2**27]


def _randn(shape: Any, dtype: str, scale: float = 3.0) -> Any:
    import torch

    return (torch.randn(shape, device="cuda") * scale).to(getattr(torch, dtype))


def _check(y: Any, x: Any) -> None:
    import torch

    ref = reference.softmax(x)
    torch.testing.assert_close(y.double(), ref, **tol(y.dtype))
    assert (y.double().norm() > 0) == (ref.norm() > 0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{r}x{h}" for r, h in SHAPES])
def test_matches_reference(dtype: str, shape: tuple[int, int]) -> None:
    import torch

    x = _randn(shape, dtype)
    y = softmax(x)
    assert type(y) is torch.Tensor and y.shape == x.shape and y.dtype == x.dtype
    _check(y, x)
    # rows sum to 1 within what the per-element tolerance allows: sum |p - q| <= rtol + n * atol
    rtol, atol = TOLERANCES[dtype]
    sums = y.double().sum(-1)
    torch.testing.assert_close(sums, torch.ones_like(sums), rtol=0, atol=rtol + shape[1] * atol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("h", [100_000, 100_003, 50257])
def test_multi_pass_and_vocab_sizes(dtype: str, h: int) -> None:
    """Past the register-resident limit (and GPT-2's odd vocabulary, scalar layout)."""
    x = _randn((5, h), dtype, 8.0)
    _check(softmax(x), x)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("h", [1, 46, 1024, 4096, 65536, 100_000])
def test_masked_and_nan_rows(dtype: str, h: int) -> None:
    """An all -inf row gives 0 (torch.softmax gives NaN); -inf entries give 0; a NaN anywhere
    makes its row NaN; other rows are unaffected."""
    import torch

    x = _randn((6, h), dtype)
    x[1] = float("-inf")  # fully masked
    x[2, ::3] = float("-inf")  # partly masked
    x[3, h // 2] = float("nan")
    x[4, 0] = float("nan")
    x[4, 1:] = float("-inf")
    y = softmax(x)
    assert torch.equal(y[1], torch.zeros_like(y[1]))
    if h > 1:
        assert (y[2, ::3] == 0).all()
    assert y[3].isnan().all() and y[4].isnan().all()
    assert not y[[0, 1, 2, 5]].isnan().any()
    _check(y[[0, 2, 5]], x[[0, 2, 5]])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_large_magnitudes_are_safe(dtype: str) -> None:
    """Max subtraction: values whose exp overflows f32 (and f16's range) stay finite."""
    import torch

    big = 60000.0 if dtype == "float16" else 1e30
    x = _randn((19, 1024), dtype)
    x[:, 7] = big
    x[3] = -big
    y = softmax(x)
    assert torch.isfinite(y).all()
    _check(y, x)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("h", [46, 111, 1024, 3584, 65536])
def test_strided_rows_nan_poisoned(dtype: str, h: int) -> None:
    import torch

    base = torch.full((19, h + 13), float("nan"), device="cuda", dtype=getattr(torch, dtype))
    x = base[:, :h]
    x.copy_(_randn((19, h), dtype))
    for view in (x, base[::2, :h], x.view(19, 1, h)):
        y = softmax(view)
        assert y.is_contiguous() and not y.isnan().any()
        _check(y, view)
    out_base = torch.full_like(base, float("nan"))
    softmax(x, out=out_base[:, :h])
    _check(out_base[:, :h], x)
    assert out_base[:, h:].isnan().all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset", range(1, 8))
@pytest.mark.parametrize("h", [4096, 3584])
def test_misaligned_storage_offsets(dtype: str, offset: int, h: int) -> None:
    import torch

    rows = 33
    base = _randn((rows * h + 8,), dtype)
    x = base[offset : offset + rows * h].view(rows, h)
    _check(softmax(x), x)
    out_base = torch.full_like(base, float("nan"))
    out = out_base[8 - offset : 8 - offset + rows * h].view(rows, h)
    softmax(x, out=out)
    _check(out, x)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(33, 129), (7, 4096), (3, 40000), (2, 100_003)])
def test_out_is_fully_written_and_in_place(dtype: str, shape: tuple[int, int]) -> None:
    import torch

    x = _randn(shape, dtype)
    out = torch.full_like(x, float("nan"))
    assert softmax(x, out=out) is out and not out.isnan().any()
    _check(out, x)
    y = x.clone()
    assert softmax(y, out=y) is y
    _check(y, x)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(0, 8), (3, 0), (0,), (2, 0, 8), ()])
def test_empty_and_zero_dim(shape: tuple[int, ...]) -> None:
    import torch

    x = _randn(shape, "float32")
    y = softmax(x)
    assert y.shape == x.shape and y.dtype == x.dtype
    if x.numel():
        assert torch.equal(y, torch.ones_like(x))  # 0-d: one element, probability 1
    x = _randn((3, 8), "float32")
    _check(softmax(x, dim=1), x)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1000, 1001), (989, 4096), (7, 65536), (3, 100_003)])
def test_bitwise_repeatable(dtype: str, shape: tuple[int, int]) -> None:
    import torch

    x = _randn(shape, dtype)
    first = softmax(x)
    for _ in range(50):
        assert torch.equal(softmax(x), first)
