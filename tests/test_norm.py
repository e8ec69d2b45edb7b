"""norm family: rms_norm, fused_add_rms_norm (in place), layer_norm over the last dimension.

CPU: every validation error before any launch (fake CUDA arrays) and the launch heuristic.
GPU: each op x dtype against fp32/fp64 torch references over rows {1, 19, 99, 989, 16384} x
hidden sizes that hit every path (warp and block per row, 1/2/4/8 resident packets, the scalar
layout, the multi-pass path), strided and misaligned rows, out=, empty inputs, f16 overflow,
NaN propagation and bitwise repeatability.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

import pytest

import aotkernels as ak
from aotkernels.ops._op import Meta
from aotkernels.ops._rowwise import rowwise_config, vectorizable
from aotkernels.ops.norm import fused_add_rms_norm, layer_norm, rms_norm
from conftest import gpu_missing
from helpers import reference
from helpers.fake_dlpack import FakeCudaArray

DTYPES = ["float32", "float16", "bfloat16"]

# (rtol, atol) against the fp64 reference on the same (rounded) inputs.
tol = partial(reference.tol, table=reference.FAMILY_TOLERANCES["norm"])


# --- CPU: validation ------------------------------------------------------------------------


def _x(shape: tuple[int, ...] = (4, 8), dtype: str = "float32", **kw: Any) -> FakeCudaArray:
    return FakeCudaArray(shape, dtype, **kw)


def _w(n: int = 8, dtype: str = "float32", ptr: int = 0x80000, **kw: Any) -> FakeCudaArray:
    return FakeCudaArray((n,), dtype, ptr=ptr, **kw)


CALLS = {
    "rms_norm": lambda x, w: rms_norm(x, w),
    "fused_add_rms_norm": lambda x, w: fused_add_rms_norm(
        x, FakeCudaArray(x.shape, x.dtype, ptr=0x4000000), w
    ),
    "layer_norm": lambda x, w: layer_norm(x, w, None),
}


@pytest.mark.parametrize("op", list(CALLS))
@pytest.mark.parametrize("dtype", ["float64", "int8", "int32"])
def test_rejects_unclaimed_dtype(op: str, dtype: str) -> None:
    with pytest.raises(
        TypeError, match=rf"{op}: x.dtype must be one of float32, float16, bfloat16, got {dtype}"
    ):
        CALLS[op](_x(dtype=dtype), _w(dtype=dtype))


@pytest.mark.parametrize("op", list(CALLS))
def test_rejects_mixed_dtypes(op: str) -> None:
    with pytest.raises(
        TypeError, match=rf"{op}: weight.dtype must be bfloat16 \(the dtype of x\), got float16"
    ):
        CALLS[op](_x(dtype="bfloat16"), _w(dtype="float16"))


@pytest.mark.parametrize("op", list(CALLS))
@pytest.mark.parametrize("wshape", [(9,), (7,), (1, 8), (8, 1), ()])
def test_rejects_weight_shape(op: str, wshape: tuple[int, ...]) -> None:
    w = FakeCudaArray(wshape, ptr=0x80000)
    with pytest.raises(
        ValueError, match=rf"{op}: weight.shape must be \(8,\) .*got {re.escape(str(wshape))}"
    ):
        CALLS[op](_x(), w)


@pytest.mark.parametrize("op", list(CALLS))
def test_weight_shape_positive_control(op: str) -> None:
    """The boundary: (hidden,) passes validation and fails only where a launch needs a driver
    (on a GPU machine the fake pointers must not reach a kernel: the GPU tests cover it)."""
    if gpu_missing() is None:
        pytest.skip("a real GPU would launch on the fake pointers")
    with pytest.raises(ak.AotKernelsError):
        CALLS[op](_x(), _w())


def test_rejects_strided_weight_and_other_device() -> None:
    with pytest.raises(ValueError, match=r"rms_norm: weight must be contiguous, got stride 2"):
        rms_norm(_x(), _w(strides=(2,)))
    with pytest.raises(
        ValueError, match=r"rms_norm: weight must be on the same device as x \(cuda:0\), got cuda:1"
    ):
        rms_norm(_x(), _w(device=1))
    np = pytest.importorskip("numpy")
    with pytest.raises(ValueError, match=r"rms_norm: weight must be on a CUDA device, got .*cpu"):
        rms_norm(_x(), np.ones(8, np.float32))


def test_rejects_bad_layouts() -> None:
    with pytest.raises(ValueError, match=r"rms_norm: x must have a contiguous last dimension"):
        rms_norm(_x((8, 4), strides=(1, 8)), _w(4))
    with pytest.raises(ValueError, match=r"layer_norm: x's leading dimensions must collapse"):
        layer_norm(_x((2, 3, 4), strides=(100, 5, 1)), _w(4))
    with pytest.raises(ValueError, match=r"rms_norm: x must have at least 1 dimension, got a 0-d"):
        rms_norm(_x(()), _w(1))


def test_rejects_non_arrays_and_streams() -> None:
    with pytest.raises(TypeError, match=r"rms_norm: x must be a CUDA array .* got builtins.list"):
        rms_norm([1.0, 2.0], _w(2))
    with pytest.raises(TypeError, match=r"rms_norm: weight must be a CUDA array .*NoneType"):
        rms_norm(_x(), None)
    with pytest.raises(TypeError, match=r"stream must be an int handle"):
        rms_norm(_x(), _w(), stream="fast")


@pytest.mark.parametrize("eps", ["1e-6", None, True])
def test_rejects_eps_type(eps: Any) -> None:
    with pytest.raises(TypeError, match=r"rms_norm: eps must be a real number, got"):
        rms_norm(_x(), _w(), eps)


@pytest.mark.parametrize("eps", [-1e-6, float("nan"), float("inf")])
def test_rejects_eps_value(eps: float) -> None:
    with pytest.raises(ValueError, match=r"layer_norm: eps must be a finite number >= 0, got"):
        layer_norm(_x(), eps=eps)


def test_out_checked() -> None:
    x, w = _x(), _w()
    with pytest.raises(ValueError, match=r"rms_norm: out.shape must be \(4, 8\), got \(4, 9\)"):
        rms_norm(x, w, out=_x((4, 9), ptr=0x90000))
    with pytest.raises(TypeError, match=r"rms_norm: out.dtype must be float32, got float16"):
        rms_norm(x, w, out=_x(dtype="float16", ptr=0x90000))
    with pytest.raises(ValueError, match=r"rms_norm: out must be on the same device as x"):
        rms_norm(x, w, out=_x(device=1, ptr=0x90000))
    with pytest.raises(ValueError, match=r"rms_norm: out must not overlap itself"):
        rms_norm(x, w, out=_x(strides=(0, 1), ptr=0x90000))
    with pytest.raises(ValueError, match=r"rms_norm: out must not partially overlap x"):
        rms_norm(x, w, out=_x(ptr=x.ptr + 4))  # same layout, shifted by one element
    with pytest.raises(ValueError, match=r"layer_norm: out must not overlap weight"):
        layer_norm(x, w, out=_x(ptr=w.ptr))
    with pytest.raises(ValueError, match=r"rms_norm: out must not partially overlap x"):
        rms_norm(x, w, out=_x((4, 8), strides=(16, 1), ptr=x.ptr))


def test_layer_norm_optional_params_checked() -> None:
    with pytest.raises(ValueError, match=r"layer_norm: bias.shape must be \(8,\) .*got \(4,\)"):
        layer_norm(_x(), None, _w(4))
    with pytest.raises(TypeError, match=r"layer_norm: bias.dtype must be float32 .*got float16"):
        layer_norm(_x(), _w(), _w(dtype="float16", ptr=0xA0000))
    if gpu_missing() is not None:  # positive controls: weight only, bias only, neither
        for w, b in ((_w(), None), (None, _w()), (None, None)):
            with pytest.raises(ak.AotKernelsError):
                layer_norm(_x(), w, b)


def test_fused_add_checks() -> None:
    op = "fused_add_rms_norm"
    x, w = _x(), _w()
    with pytest.raises(TypeError, match=rf"{op}: residual.dtype must be float32 .*got float16"):
        fused_add_rms_norm(x, _x(dtype="float16", ptr=0x4000000), w)
    with pytest.raises(ValueError, match=rf"{op}: residual.shape must be \(4, 8\) .*got \(4, 9\)"):
        fused_add_rms_norm(x, _x((4, 9), ptr=0x4000000), w)
    with pytest.raises(ValueError, match=rf"{op}: residual must be on the same device as x"):
        fused_add_rms_norm(x, _x(device=1, ptr=0x4000000), w)
    with pytest.raises(ValueError, match=rf"{op}: x must not overlap residual"):
        fused_add_rms_norm(x, _x(ptr=x.ptr), w)
    with pytest.raises(ValueError, match=rf"{op}: residual must not overlap itself"):
        fused_add_rms_norm(x, _x(strides=(0, 1), ptr=0x4000000), w)
    with pytest.raises(ValueError, match=rf"{op}: x must not overlap itself"):
        fused_add_rms_norm(_x(strides=(4, 1)), _x(ptr=0x4000000), w)
    with pytest.raises(ValueError, match=rf"{op}: x must not overlap weight"):
        fused_add_rms_norm(x, _x(ptr=0x4000000), _w(ptr=x.ptr))
    with pytest.raises(TypeError, match=rf"{op}: eps must be a real number"):
        fused_add_rms_norm(x, _x(ptr=0x4000000), w, "small")


def test_fused_add_rejects_immutable_arrays(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the DLPack path (builds without the XLA extension; with it, JAX arrays get new ones)."""
    from aotkernels import _jax

    monkeypatch.setattr(_jax, "available", lambda: False)
    jax_like = type("Array", (FakeCudaArray,), {"__module__": "jax._fake"})
    with pytest.raises(TypeError, match=r"fused_add_rms_norm: x must be a mutable array"):
        fused_add_rms_norm(jax_like((4, 8)), _x(ptr=0x4000000), _w())


def test_fused_add_empty_is_no_launch() -> None:
    """0 rows: nothing to do, no launch (this machine has no driver, so a launch would raise)."""
    x, r = _x((0, 8)), _x((0, 8), ptr=0x4000000)
    assert fused_add_rms_norm(x, r, _w()) == (x, r)
    x, r = _x((3, 0)), _x((3, 0), ptr=0x4000000)
    assert fused_add_rms_norm(x, r, _w(0)) == (x, r)


# --- CPU: launch heuristic --------------------------------------------------------------------


@pytest.mark.parametrize("itemsize", [4, 2])
@pytest.mark.parametrize("vectorized", [True, False])
def test_heuristic_invariants(itemsize: int, vectorized: bool) -> None:
    v = 16 // itemsize
    sizes = [*range(1, 600), *range(600, 140_000, 997), 8 * 1024 * v, 8 * 1024 * v + 1, 10**6]
    for cols in sizes:
        cfg = rowwise_config(7, cols, itemsize, 132, vectorized)
        g, r = cfg.block
        assert g * r % 32 == 0 and g * r <= 1024, (cols, cfg)
        assert (g <= 32 and g & (g - 1) == 0) or g % 32 == 0, (cols, cfg)
        n = cfg.vecs_per_thread
        if vectorized:
            assert n in (0, 1, 2, 4, 8)
        else:
            assert n in (0, 4)  # the kernels keep scalar rows resident with N = 4 only
        if n:
            assert n * g * v >= cols, (cols, cfg)  # the row fits its row group
        assert cfg.grid[0] >= 1 and cfg.grid[1] == 1


@pytest.mark.parametrize(
    ("cols", "itemsize", "expect"),
    [
        (1024, 2, (4, 32, 8)),  # bf16 1024: a warp per row, 8 rows per block
        (4096, 2, (4, 128, 2)),
        (8192, 2, (4, 256, 1)),
        (16384, 2, (4, 512, 1)),
        (65536, 2, (8, 1024, 1)),  # the largest resident row: 128 KiB
        (65544, 2, (0, 512, 1)),  # multi-pass beyond
        (32768, 4, (8, 1024, 1)),
        (32772, 4, (0, 512, 1)),
        (384, 2, (2, 32, 8)),
        (46, 2, (1, 8, 32)),
    ],
)
def test_heuristic_table(cols: int, itemsize: int, expect: tuple[int, int, int]) -> None:
    cfg = rowwise_config(16384, cols, itemsize, 132, True)
    assert (cfg.vecs_per_thread, *cfg.block) == expect


def test_vectorizable_rule() -> None:
    def m(align: int) -> Meta:
        return Meta((10, 4096), (4096, 1), "bf16", align)

    assert vectorizable(4096, 2, [m(16), m(16), None], [4096, 4096], 10)
    assert not vectorizable(4095, 2, [m(16), m(16)], [4095, 4095], 10)  # cols % 8
    assert not vectorizable(4096, 2, [m(2), m(16)], [4096, 4096], 10)  # misaligned x
    assert not vectorizable(4096, 2, [m(16), m(16)], [4100, 4096], 10)  # row stride
    assert vectorizable(4096, 2, [m(16), m(16)], [4100, 4096], 1)  # one row: stride unused


# --- GPU ------------------------------------------------------------------------------------

ROWS = [1, 19, 99, 989, 16384]
HIDDEN = [1, 46, 111, 392, 1024, 3584, 4096, 8192, 16384, 40000, 65536]
SHAPES = [(r, h) for r in ROWS for h in HIDDEN if r * h <= 2**27]


def _randn(shape: Any, dtype: str, scale: float = 3.0, gen: Any = None) -> Any:
    import torch

    t = torch.randn(shape, device="cuda", dtype=torch.float32, generator=gen) * scale
    return t.to(getattr(torch, dtype))


def _weight(h: int, dtype: str) -> Any:
    import torch

    return (torch.rand(h, device="cuda") + 0.5).to(getattr(torch, dtype))


def _check(y: Any, ref: Any) -> None:
    import torch

    torch.testing.assert_close(y.double(), ref, **tol(y.dtype))
    assert (y.double().norm() > 0) == (ref.norm() > 0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{r}x{h}" for r, h in SHAPES])
def test_rms_norm_matches_reference(dtype: str, shape: tuple[int, int]) -> None:
    import torch

    x, w = _randn(shape, dtype), _weight(shape[1], dtype)
    y = rms_norm(x, w)
    assert type(y) is torch.Tensor and y.shape == x.shape and y.dtype == x.dtype
    _check(y, reference.rms_norm(x, w))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{r}x{h}" for r, h in SHAPES])
def test_layer_norm_matches_reference(dtype: str, shape: tuple[int, int]) -> None:
    x = _randn(shape, dtype) + 2.0  # a non-zero mean exercises the centring
    w, b = _weight(shape[1], dtype), _randn(shape[1], dtype, 1.0)
    _check(layer_norm(x, w, b), reference.layer_norm(x, w, b))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{r}x{h}" for r, h in SHAPES])
def test_fused_add_rms_norm_matches_reference(dtype: str, shape: tuple[int, int]) -> None:
    import torch

    x, r, w = _randn(shape, dtype), _randn(shape, dtype), _weight(shape[1], dtype)
    ref_x, ref_r = reference.fused_add_rms_norm(x, r, w)
    xo, ro = fused_add_rms_norm(x, r, w)
    assert xo is x and ro is r
    assert torch.equal(r, ref_r)  # one f32 add rounded once: bitwise what torch computes
    _check(x, ref_x)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("h", [100_000, 100_003])
def test_multi_pass_hidden(dtype: str, h: int) -> None:
    """Rows past the register-resident limit: streamed (vector layout at 100000, scalar at
    100003)."""
    import torch

    x, w, b = _randn((5, h), dtype), _weight(h, dtype), _randn(h, dtype, 1.0)
    _check(rms_norm(x, w), reference.rms_norm(x, w))
    _check(layer_norm(x, w, b), reference.layer_norm(x, w, b))
    r = _randn((5, h), dtype)
    ref_x, ref_r = reference.fused_add_rms_norm(x, r, w)
    fused_add_rms_norm(x, r, w)
    assert torch.equal(r, ref_r)
    _check(x, ref_x)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("h", [46, 111, 1024, 3584, 65536])
def test_strided_rows_nan_poisoned(dtype: str, h: int) -> None:
    """x[:, :h] of a NaN-poisoned wider buffer (no copy); a strided out= leaves the gaps."""
    import torch

    base = torch.full((19, h + 13), float("nan"), device="cuda", dtype=getattr(torch, dtype))
    x = base[:, :h]
    x.copy_(_randn((19, h), dtype))
    w, b = _weight(h, dtype), _randn(h, dtype, 1.0)
    for view in (x, base[::2, :h], x.view(19, 1, h)):
        _check(rms_norm(view, w), reference.rms_norm(view, w))
        _check(layer_norm(view, w, b), reference.layer_norm(view, w, b))
    out_base = torch.full_like(base, float("nan"))
    rms_norm(x, w, out=out_base[:, :h])
    _check(out_base[:, :h], reference.rms_norm(x, w))
    assert out_base[:, h:].isnan().all()
    # fused, with strided x and residual: the gaps of both stay poisoned
    res_base = torch.full_like(base, float("nan"))
    res_base[:, :h] = _randn((19, h), dtype)
    ref_x, ref_r = reference.fused_add_rms_norm(x, res_base[:, :h], w)
    fused_add_rms_norm(x, res_base[:, :h], w)
    assert torch.equal(res_base[:, :h], ref_r)
    _check(x, ref_x)
    assert base[:, h:].isnan().all() and res_base[:, h:].isnan().all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset", range(1, 8))
@pytest.mark.parametrize("h", [4096, 3584])
def test_misaligned_storage_offsets(dtype: str, offset: int, h: int) -> None:
    """Rows that start off a 16-byte boundary take the scalar layout; never a fault."""
    import torch

    rows = 33
    base = _randn((rows * h + 8,), dtype)
    x = base[offset : offset + rows * h].view(rows, h)
    w = _weight(h, dtype)
    _check(rms_norm(x, w), reference.rms_norm(x, w))
    out_base = torch.full_like(base, float("nan"))
    out = out_base[8 - offset : 8 - offset + rows * h].view(rows, h)
    layer_norm(x, w, None, out=out)
    _check(out, reference.layer_norm(x, w))
    w_base = _weight(h + 1, dtype)  # a misaligned weight too
    _check(rms_norm(x, w_base[1:]), reference.rms_norm(x, w_base[1:]))


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(33, 129), (7, 4096), (3, 40000), (2, 100_003)])
def test_out_is_fully_written(op: str, dtype: str, shape: tuple[int, int]) -> None:
    import torch

    x, w = _randn(shape, dtype), _weight(shape[1], dtype)
    out = torch.full_like(x, float("nan"))
    if op == "rms_norm":
        y, ref = rms_norm(x, w, out=out), reference.rms_norm(x, w)
    else:
        y, ref = layer_norm(x, w, out=out), reference.layer_norm(x, w)
    assert y is out and not out.isnan().any()
    _check(out, ref)


@pytest.mark.gpu
def test_in_place() -> None:
    x, w = _randn((64, 4096), "bfloat16"), _weight(4096, "bfloat16")
    ref = reference.rms_norm(x, w)
    assert rms_norm(x, w, out=x) is x
    _check(x, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("h", [8, 4096, 65536, 100_000])
def test_f16_large_values_do_not_overflow(h: int) -> None:
    """|x| > 256: x**2 overflows f16 (max 65504), the f32 accumulation must not."""
    import torch

    x = (torch.rand((9, h), device="cuda") * 3000 + 257).half()
    x[:, ::2] *= -1
    w = _weight(h, "float16")
    y = rms_norm(x, w)
    assert torch.isfinite(y).all()
    _check(y, reference.rms_norm(x, w))
    _check(layer_norm(x, w), reference.layer_norm(x, w))


@pytest.mark.gpu
def test_nan_and_inf_propagate() -> None:
    import torch

    x = _randn((4, 1024), "float32")
    x[1, 7] = float("nan")
    x[2, 9] = float("inf")
    w = _weight(1024, "float32")
    y = rms_norm(x, w)
    assert y[1].isnan().all() and not y[[0, 3]].isnan().any()
    assert torch.equal(y[2].isnan(), reference.rms_norm(x, w)[2].isnan())
    z = layer_norm(x, w)
    assert z[1].isnan().all() and z[2].isnan().all() and not z[[0, 3]].isnan().any()


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(0, 8), (3, 0), (0,), (2, 0, 8)])
def test_empty_inputs(shape: tuple[int, ...]) -> None:
    import torch

    x = _randn(shape, "float32")
    w = _weight(shape[-1], "float32")
    for y in (rms_norm(x, w), layer_norm(x, w, w)):
        assert y.shape == x.shape and y.dtype == x.dtype
    r = torch.empty_like(x)
    assert fused_add_rms_norm(x, r, w) == (x, r)
    # the next op still works
    x, w = _randn((3, 8), "float32"), _weight(8, "float32")
    _check(rms_norm(x, w), reference.rms_norm(x, w))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1000, 1001), (989, 4096), (7, 65536), (3, 100_003)])
def test_bitwise_repeatable(dtype: str, shape: tuple[int, int]) -> None:
    import torch

    x, w, b = _randn(shape, dtype), _weight(shape[1], dtype), _randn(shape[1], dtype, 1.0)
    first, first_ln = rms_norm(x, w), layer_norm(x, w, b)
    r0 = _randn(shape, dtype)
    x1, r1 = x.clone(), r0.clone()
    fused_add_rms_norm(x1, r1, w)
    for _ in range(20):
        assert torch.equal(rms_norm(x, w), first)
        assert torch.equal(layer_norm(x, w, b), first_ln)
        x2, r2 = x.clone(), r0.clone()
        fused_add_rms_norm(x2, r2, w)
        assert torch.equal(x2, x1) and torch.equal(r2, r1)


@pytest.mark.gpu
def test_runs_on_the_callers_stream() -> None:
    import torch

    s = torch.cuda.Stream()
    x, w = _randn((989, 4096), "bfloat16"), _weight(4096, "bfloat16")
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        y = rms_norm(x, w)
        z = rms_norm(x, w, stream=s.cuda_stream)
    s.synchronize()
    _check(y, reference.rms_norm(x, w))
    assert torch.equal(y, z)


@pytest.mark.gpu
def test_cached_plans_follow_pointers_alignment_and_overlap() -> None:
    """Second calls take the cached prepared launch: new pointers, a change of 16-byte alignment
    and a newly overlapping argument must all still give the right answer or the error."""
    import torch

    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    base = torch.randn(64 * 1024 + 8, device="cuda", dtype=torch.bfloat16)
    for off in (0, 8, 1, 0):  # aligned, aligned, misaligned (scalar path), aligned again
        x = base[off : off + 64 * 1024].view(64, 1024)
        torch.testing.assert_close(
            rms_norm(x, w).double(), reference.rms_norm(x, w), **tol(torch.bfloat16)
        )
    for _ in range(3):
        x = torch.randn(32, 1024, device="cuda", dtype=torch.bfloat16)
        r = torch.randn_like(x)
        s = (x.float() + r.float()).to(x.dtype)
        fused_add_rms_norm(x, r, w)
        assert torch.equal(r, s)
        torch.testing.assert_close(x.double(), reference.rms_norm(s, w), **tol(torch.bfloat16))
    same = torch.randn(32, 1024, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="must not overlap"):
        fused_add_rms_norm(same, same, w)


# --- Gemma norms and QK-norm on [tokens, heads, head_dim] views ------------------------------


def test_two_level_layouts_checked() -> None:
    """rms_norm takes rows with two independent strides (q/k heads of a fused QKV buffer);
    three levels, a self-overlapping out= and the ops that keep one row stride refuse."""
    w = _w(8)
    q = _x((5, 3, 8), strides=(72, 8, 1))  # qkv[:, :24].view(5, 3, 8) of a [5, 72] buffer
    with pytest.raises(ValueError, match=r"rms_norm: x's leading dimensions must collapse into "
                       r"at most two row strides"):  # fmt: skip
        rms_norm(_x((2, 3, 4, 8), strides=(1000, 100, 10, 1)), w)
    with pytest.raises(ValueError, match=r"rms_norm: out must not overlap itself"):
        rms_norm(q, w, out=_x((5, 3, 8), strides=(16, 8, 1), ptr=0x900000))
    with pytest.raises(ValueError, match=r"rms_norm: out's rows must split like x's"):
        # x: [2][3 x 4] rows (strides 200, 8); out: [2 x 3][4] rows (strides 40, 8)
        x4 = _x((2, 3, 4, 8), strides=(200, 32, 8, 1))
        rms_norm(x4, w, out=_x((2, 3, 4, 8), strides=(120, 40, 8, 1), ptr=0x900000))
    with pytest.raises(ValueError, match=r"rms_norm: out must not partially overlap x"):
        rms_norm(q, w, out=_x((5, 3, 8), strides=(72, 8, 1), ptr=q.ptr + 4))
    with pytest.raises(ValueError, match=r"layer_norm: x's leading dimensions must collapse"):
        layer_norm(q, w)
    with pytest.raises(ValueError, match=r"fused_add_rms_norm: x's leading dimensions must"):
        fused_add_rms_norm(q, _x((5, 3, 8), ptr=0x4000000), w)
    with pytest.raises(TypeError, match=r"rms_norm: gemma must be a bool, got int"):
        rms_norm(_x(), w, gemma=1)
    with pytest.raises(TypeError, match=r"fused_add_rms_norm: gemma must be a bool, got str"):
        fused_add_rms_norm(_x(), _x(ptr=0x4000000), w, gemma="yes")
    if gpu_missing() is not None:  # positive controls: in place and out-of-place head views
        for out in (None, q, _x((5, 3, 8), ptr=0x900000)):
            with pytest.raises(ak.AotKernelsError):
                rms_norm(q, w, out=out)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (19, 111), (7, 2304), (33, 3584), (3, 100_003)])
def test_gemma_rms_norm(dtype: str, shape: tuple[int, int]) -> None:
    import torch

    x = _randn(shape, dtype)
    w = _randn(shape[1], dtype, 0.5)  # Gemma's weights sit around 0
    _check(rms_norm(x, w, gemma=True), reference.rms_norm(x, w, gemma=True))
    r = _randn(shape, dtype)
    s = (x.float() + r.float()).to(x.dtype)
    xo, ro = fused_add_rms_norm(x, r, w, gemma=True)
    assert xo is x and ro is r and torch.equal(r, s)
    _check(x, reference.rms_norm(s, w, gemma=True))
    # gemma=False is the plain weight, also with -0.0 weights (the sign of 0 * w survives)
    w0 = torch.zeros_like(w).neg()
    bits = torch.int32 if dtype == "float32" else torch.int16
    y = rms_norm(x, w0).view(bits)
    assert torch.equal(y, (x.float() * w0.float()).to(x.dtype).view(bits))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [64, 128, 256, 80, 72])
@pytest.mark.parametrize(("tokens", "heads", "kv_heads"), [(1, 8, 1), (7, 32, 8), (257, 16, 4)])
@pytest.mark.parametrize("pad", [0, 1])
def test_qk_norm_on_fused_qkv_views(
    dtype: str, head_dim: int, tokens: int, heads: int, kv_heads: int, pad: int
) -> None:
    """Qwen3 / Gemma3 q_norm and k_norm: rms_norm over head_dim of q and k sliced from a
    NaN-poisoned fused QKV buffer (token stride (H + 2 Hk) D + pad, head stride D), out of
    place and in place; v and the padding stay untouched."""
    import torch

    q_size, kv_size = heads * head_dim, kv_heads * head_dim
    width = q_size + 2 * kv_size + pad
    qkv = _randn((tokens, width), dtype)
    if pad:
        qkv[:, -pad:] = float("nan")
    q = qkv[:, :q_size].view(tokens, heads, head_dim) if not pad else torch.as_strided(
        qkv, (tokens, heads, head_dim), (width, head_dim, 1))  # fmt: skip
    k = torch.as_strided(qkv, (tokens, kv_heads, head_dim), (width, head_dim, 1), q_size)
    wq, wk = _weight(head_dim, dtype), _weight(head_dim, dtype)
    ref_q, ref_k = reference.rms_norm(q, wq), reference.rms_norm(k, wk)
    y = rms_norm(q, wq)
    assert y.shape == q.shape and y.is_contiguous()
    _check(y, ref_q)
    before = qkv.clone()
    assert rms_norm(k, wk, out=k) is k
    assert rms_norm(q, wq, gemma=True, out=q) is q
    _check(k, ref_k)
    _check(q, reference.rms_norm(before[:, :q_size].view(tokens, heads, head_dim), wq, gemma=True))
    rest = slice(q_size + kv_size, width)
    assert torch.equal(qkv[:, rest].view(torch.uint8), before[:, rest].view(torch.uint8))
    # heads-major storage viewed token-major: the head stride is the larger one
    hm = _randn((heads, tokens, head_dim), dtype).transpose(0, 1)
    _check(rms_norm(hm, wq), reference.rms_norm(hm, wq))
    out = torch.full((heads, tokens, head_dim), float("nan"), device="cuda",
                     dtype=hm.dtype).transpose(0, 1)  # fmt: skip
    rms_norm(hm, wq, out=out)
    _check(out, reference.rms_norm(hm, wq))


def test_qk_norm_launch_rule() -> None:
    """rms_norm on q of a fused QKV buffer: one launch over T * H rows whose offsets are
    (r // H) * token stride + (r % H) * D (kernels/common/ak/reduce.cuh, Row::off), written to a
    contiguous [T, H, D] out; Gemma sets flags bit 2."""
    from aotkernels.ops._op import REGISTRY, Args, Meta

    class _Args(Args):
        sm_count = 132

    t_, h, d, width = 5, 3, 128, 128 * 7
    x = Meta((t_, h, d), (width, d, 1), "bf16", 16)
    out = Meta((t_, h, d), (h * d, d, 1), "bf16", 16)
    w = Meta((d,), (1,), "bf16", 16)
    op = REGISTRY["rms_norm"]
    a = _Args(op, {"x": x, "weight": w}, {"eps": 1e-6, "gemma": True}, -1, {"out": out})
    op.shapes(a)
    (ln,) = op.launch(a)
    args = ln.args
    assert (args["rows"], args["inner"], args["x_row_stride"], args["x_outer_stride"]) == (
        t_ * h, h, d, width)  # fmt: skip
    assert (args["out_row_stride"], args["out_outer_stride"]) == (d, h * d)
    assert args["flags"] == 1 | 4
