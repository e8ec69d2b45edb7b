"""activation family: relu, gelu (none/tanh), silu, sigmoid.

CPU: validation errors before any launch (fake CUDA arrays). GPU: every op x dtype against the
fp32 torch reference on odd sizes, strided/misaligned/empty inputs, out= and determinism.
"""

from __future__ import annotations

import pytest

import aotkernels as ak
from helpers.fake_dlpack import FakeCudaArray
from helpers.reference import activation, tol

OPS = {
    "relu": lambda x, **kw: ak.relu(x, **kw),
    "gelu": lambda x, **kw: ak.gelu(x, **kw),
    "gelu_tanh": lambda x, **kw: ak.gelu(x, approximate="tanh", **kw),
    "silu": lambda x, **kw: ak.silu(x, **kw),
    "sigmoid": lambda x, **kw: ak.sigmoid(x, **kw),
}
DTYPES = ["float32", "float16", "bfloat16"]


# --- CPU: validation ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "int8", "int32"])
def test_rejects_unclaimed_dtype(dtype: str) -> None:
    with pytest.raises(
        TypeError,
        match=r"silu: x.dtype must be one of float32, float16, "
        rf"bfloat16, got {dtype}",
    ):
        ak.silu(FakeCudaArray((4, 8), dtype))


def test_rejects_non_array() -> None:
    with pytest.raises(TypeError, match=r"relu: x must be a CUDA array .* got builtins.list"):
        ak.relu([1.0, 2.0])


def test_rejects_cpu_array() -> None:
    np = pytest.importorskip("numpy")
    with pytest.raises(ValueError, match=r"sigmoid: x must be on a CUDA device, got .*cpu"):
        ak.sigmoid(np.ones(4, np.float32))


def test_rejects_transposed_last_dim() -> None:
    x = FakeCudaArray((8, 4), strides=(1, 8))
    with pytest.raises(ValueError, match=r"silu: x must have a contiguous last dimension"):
        ak.silu(x)


def test_rejects_uncollapsible_leading_dims() -> None:
    x = FakeCudaArray((2, 3, 4), strides=(100, 5, 1))
    with pytest.raises(ValueError, match=r"leading dimensions must collapse"):
        ak.silu(x)


def test_rejects_bad_approximate() -> None:
    with pytest.raises(ValueError, match=r"gelu: approximate must be 'none' or 'tanh', got 'x'"):
        ak.gelu(FakeCudaArray((4,)), approximate="x")


def test_out_shape_dtype_device_checked() -> None:
    x = FakeCudaArray((4, 8))
    with pytest.raises(ValueError, match=r"relu: out.shape must be \(4, 8\), got \(4, 9\)"):
        ak.relu(x, out=FakeCudaArray((4, 9), ptr=0x90000))
    with pytest.raises(TypeError, match=r"relu: out.dtype must be float32, got float16"):
        ak.relu(x, out=FakeCudaArray((4, 8), "float16", ptr=0x90000))
    with pytest.raises(
        ValueError,
        match=r"relu: out must be on the same device as x \(cuda:0\), "
        r"got cuda:1",
    ):
        ak.relu(x, out=FakeCudaArray((4, 8), device=1, ptr=0x90000))


def test_overlapping_out_rejected() -> None:
    x = FakeCudaArray((4, 8))
    with pytest.raises(ValueError, match=r"relu: out must not overlap itself"):
        ak.relu(x, out=FakeCudaArray((4, 8), strides=(0, 1), ptr=0x90000))


def test_stream_argument_type_checked() -> None:
    with pytest.raises(TypeError, match=r"stream must be an int handle"):
        ak.relu(FakeCudaArray((4,)), stream="fast")


# --- GPU ------------------------------------------------------------------------------------


def _randn(shape, dtype, scale=3.0):  # type: ignore[no-untyped-def]
    import torch

    return (torch.randn(shape, device="cuda", dtype=torch.float32) * scale).to(
        getattr(torch, dtype)
    )


@pytest.mark.gpu
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape", [(1,), (17,), (4097,), (65537,), (7, 46), (5, 111), (3, 3584), (2, 3, 5, 7)]
)
def test_matches_reference(op: str, dtype: str, shape: tuple[int, ...]) -> None:
    import torch

    x = _randn(shape, dtype)
    y = OPS[op](x)
    assert type(y) is torch.Tensor and y.shape == x.shape and y.dtype == x.dtype
    ref = activation(op, x)
    torch.testing.assert_close(y.float(), ref, **tol(y.dtype), check_dtype=False)
    if ref.abs().max() > 1e-3:  # outputs that must be visibly non-zero (never all unwritten)
        assert y.float().norm() > 0


@pytest.mark.gpu
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_out_is_fully_written(op: str, dtype: str) -> None:
    import torch

    x = _randn((33, 129), dtype)
    out = torch.full_like(x, float("nan"))
    y = OPS[op](x, out=out)
    assert y is out and not out.isnan().any()
    torch.testing.assert_close(out.float(), activation(op, x), **tol(x.dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("h", [46, 111, 3584])
def test_strided_rows_nan_poisoned(dtype: str, h: int) -> None:
    import torch

    base = torch.full((19, h + 13), float("nan"), device="cuda", dtype=getattr(torch, dtype))
    x = base[:, :h]
    x.copy_(_randn((19, h), dtype))
    for view in (x, base[::2, :h], x.view(19, 1, h)):
        y = ak.silu(view)
        assert y.is_contiguous() and not y.isnan().any()
        assert torch.equal(y, ak.silu(view.contiguous()))
    # strided out=: only the view is written, the poison around it stays
    out_base = torch.full_like(base, float("nan"))
    ak.gelu(x, out=out_base[:, :h])
    assert torch.equal(out_base[:, :h], ak.gelu(x.contiguous()))
    assert out_base[:, h:].isnan().all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset", range(1, 8))
def test_misaligned_storage_offsets(dtype: str, offset: int) -> None:
    import torch

    base = _randn((4097 + 8,), dtype)
    x = base[offset : offset + 4097]
    out_base = torch.full_like(base, float("nan"))
    out = out_base[8 - offset : 8 - offset + 4097]
    ak.sigmoid(x, out=out)
    torch.testing.assert_close(out.float(), activation("sigmoid", x), **tol(x.dtype))
    torch.testing.assert_close(ak.sigmoid(x).float(), activation("sigmoid", x), **tol(x.dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 5), ()])
def test_empty_and_zero_dim(shape: tuple[int, ...]) -> None:
    import torch

    x = _randn(shape, "float32")
    y = ak.relu(x)
    assert y.shape == x.shape
    assert torch.equal(y, torch.relu(x))
    assert torch.equal(
        ak.relu(_randn((5,), "float32")) >= 0, torch.ones(5, dtype=torch.bool, device="cuda")
    )


@pytest.mark.gpu
def test_in_place_and_special_values() -> None:
    import torch

    x = torch.tensor(
        [float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 3.0, -3.0], device="cuda"
    )
    assert torch.equal(ak.relu(x).isnan(), torch.relu(x).isnan())
    torch.testing.assert_close(ak.relu(x), torch.relu(x), equal_nan=True)
    torch.testing.assert_close(ak.sigmoid(x), torch.sigmoid(x), equal_nan=True)
    torch.testing.assert_close(ak.silu(x), torch.nn.functional.silu(x), equal_nan=True)
    y = x.clone()
    assert ak.silu(y, out=y) is y
    torch.testing.assert_close(y, torch.nn.functional.silu(x), equal_nan=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_bitwise_repeatable(dtype: str) -> None:
    import torch

    x = _randn((1000, 1001), dtype)
    first = ak.gelu(x, approximate="tanh")
    for _ in range(100):
        assert torch.equal(ak.gelu(x, approximate="tanh"), first)


@pytest.mark.gpu
def test_more_than_2_31_elements() -> None:
    import torch

    n = 2**31 + 77
    free, _ = torch.cuda.mem_get_info()
    if free < 3 * 2 * n + (1 << 30):
        pytest.skip(f"needs ~{3 * 2 * n >> 30} GiB free on the GPU, has {free >> 30}")
    x = torch.empty(n, device="cuda", dtype=torch.float16)
    x.uniform_(-4, 4)
    y = ak.relu(x)
    assert torch.equal(y, torch.relu(x))  # relu is exact: the whole tensor must match
    del y
    tail = x[-1000:]
    out = torch.full_like(x, float("nan"))
    ak.silu(x, out=out)
    torch.testing.assert_close(out[-1000:].float(), activation("silu", tail), **tol(x.dtype))
    torch.testing.assert_close(
        out[2**31 - 500 : 2**31 + 500].float(),
        activation("silu", x[2**31 - 500 : 2**31 + 500]),
        **tol(x.dtype),
    )
    assert not out.isnan().any()


@pytest.mark.gpu
def test_cached_plan_serves_new_tensors_and_keeps_checks() -> None:
    """The second call of a layout takes the cached plan: it must use the new pointers, and a
    partially overlapping out= must still be rejected."""
    import torch

    a, b = _randn((64, 96), "float32"), _randn((64, 96), "float32")
    for t in (a, b, a):
        torch.testing.assert_close(ak.silu(t), activation("silu", t), **tol(t.dtype))
    out = torch.empty_like(a)
    for t in (a, b):
        ak.relu(t, out=out)
        assert torch.equal(out, torch.relu(t))
    base = _randn((64 * 96 + 96,), "float32")
    x = base[: 64 * 96].view(64, 96)
    overlapping = base.as_strided((64, 96), (97, 1))
    for _ in range(2):
        with pytest.raises(ValueError, match="partially overlap"):
            ak.relu(x, out=overlapping)
