"""Backward kernels: activation, gated, softmax, rms_norm and layer_norm gradients.

CPU: the pure shape checks and launch configuration of ``ops/_backward.py`` (typed errors, the
capacity of every launch shape, the workspace size against the launch that uses it).
GPU: each backward entry x dtype, launched directly from that configuration through
``_core.LaunchPlan``, against float64 torch autograd of the reference formula evaluated on the
same (already rounded) inputs: odd sizes, strided and misaligned rows, NaN-poisoned outputs
(an element the kernel fails to write stays NaN and fails the comparison), bitwise
repeatability of dweight / dbias.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import pytest

from aotkernels.ops import _backward as bw

DTYPES = ["float32", "float16", "bfloat16"]
SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
ODD_COLS = [1, 17, 97, 111, 1025, 4097]
ACTIVATIONS = ["relu", "gelu", "gelu_tanh", "silu", "sigmoid"]
GATED = ["silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"]

# (rtol, atol relative to the largest |reference| of the array): the reference is float64
# autograd on the very inputs the kernel read, so the difference is the kernel's f32 arithmetic
# plus its one rounding on store.
TOLERANCES = {
    # f32 results: expf / normcdff / IEEE division (a few ulps) in the activations; the row sums
    # of the norms and softmax (fixed-order trees over up to 16384 terms, ~sqrt(n) ulps),
    # rsqrtf and __fdividef (2 ulps each) enter dx through terms that may cancel, hence an
    # absolute part relative to the array's largest gradient.
    "float32": (2e-5, 2e-5),
    # one rounding to f16 (half an ulp: 2**-11); a tie may flip: one ulp, 2**-10. The fast-math
    # f32 part (__expf, erfc_pos) is ~1e-6 relative.
    "float16": (1e-3, 1e-5),
    # one rounding to bf16 (half an ulp: 2**-9); a tie may flip: one ulp, 2**-8, and margin.
    "bfloat16": (8e-3, 1e-5),
}


class Meta(NamedTuple):
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    align: int = 16


def fake(shape: tuple[int, ...], dtype: str = "bf16", strides: Any = None, align: int = 16) -> Meta:
    if strides is None:
        strides, step = [], 1
        for n in reversed(shape):
            strides.insert(0, step)
            step *= n
    return Meta(tuple(shape), tuple(strides), dtype, align)


# --- CPU: shape checks -------------------------------------------------------------------------


def test_elementwise_shapes_and_errors() -> None:
    x = fake((4, 6))
    assert bw.elementwise_backward_shapes("silu_backward", fake((4, 6)), x) == [((4, 6), "bf16")]
    with pytest.raises(TypeError, match=r"silu_backward: x.dtype must be one of float32"):
        bw.elementwise_backward_shapes("silu_backward", fake((4, 6), "int8"), fake((4, 6), "int8"))
    with pytest.raises(TypeError, match=r"silu_backward: grad.dtype must be bfloat16 \(the dtype"):
        bw.elementwise_backward_shapes("silu_backward", fake((4, 6), "f32"), x)
    with pytest.raises(ValueError, match=r"silu_backward: grad.shape must be \(4, 6\)"):
        bw.elementwise_backward_shapes("silu_backward", fake((4, 5)), x)
    with pytest.raises(ValueError, match=r"silu_backward: x must have a contiguous last dim"):
        bw.elementwise_backward_shapes("silu_backward", fake((4, 6)), fake((4, 6), strides=(1, 4)))
    with pytest.raises(ValueError, match=r"grad's leading dimensions must collapse"):
        bw.elementwise_backward_shapes(
            "silu_backward", fake((2, 3, 6), strides=(100, 7, 1)), fake((2, 3, 6))
        )


def test_gated_and_softmax_shapes() -> None:
    assert bw.gated_backward_shapes("silu_and_mul_backward", fake((3, 4)), fake((3, 8))) == [
        ((3, 8), "bf16")
    ]
    with pytest.raises(ValueError, match=r"x.shape\[-1\] must be even"):
        bw.gated_backward_shapes("silu_and_mul_backward", fake((3, 4)), fake((3, 7)))
    with pytest.raises(ValueError, match=r"grad.shape must be \(3, 4\)"):
        bw.gated_backward_shapes("silu_and_mul_backward", fake((3, 8)), fake((3, 8)))
    assert bw.softmax_backward_shapes("softmax_backward", fake((2, 5)), fake((2, 5))) == [
        ((2, 5), "bf16")
    ]
    with pytest.raises(TypeError, match=r"softmax_backward: grad.dtype must be bfloat16"):
        bw.softmax_backward_shapes("softmax_backward", fake((2, 5), "f16"), fake((2, 5)))


def test_norm_shapes_and_errors() -> None:
    op = "layer_norm_backward"
    outs = bw.norm_backward_shapes(op, fake((6, 32)), fake((6, 32)), fake((32,)), True)
    assert outs[:3] == [((6, 32), "bf16"), ((32,), "bf16"), ((32,), "bf16")]
    assert outs[3][1] == "f32" and outs[3][0][0] == 2
    outs = bw.norm_backward_shapes("rms_norm_backward", fake((6, 32)), fake((6, 32)), None, False)
    assert outs[1:] == [((0,), "bf16"), ((0,), "bf16"), ((0,), "f32")]
    with pytest.raises(ValueError, match=r"weight.shape must be \(32,\)"):
        bw.norm_backward_shapes(op, fake((6, 32)), fake((6, 32)), fake((31,)), False)
    with pytest.raises(TypeError, match=r"weight.dtype must be bfloat16"):
        bw.norm_backward_shapes(op, fake((6, 32)), fake((6, 32)), fake((32,), "f32"), False)
    with pytest.raises(ValueError, match=r"weight must be contiguous"):
        bw.norm_backward_shapes(op, fake((6, 32)), fake((6, 32)), fake((32,), strides=(2,)), False)
    with pytest.raises(ValueError, match=r"at least 1 dimension"):
        bw.norm_backward_shapes(op, fake(()), fake(()), None, False)
    for dtype, cap in (("bf16", 16384), ("f16", 16384), ("f32", 8192)):
        bw.norm_backward_shapes(op, fake((2, cap), dtype), fake((2, cap), dtype), None, False)
        with pytest.raises(NotImplementedError, match=rf"must be <= {cap} for {dtype}"):
            big = fake((2, cap + 1), dtype)
            bw.norm_backward_shapes(op, big, big, None, False)


# --- CPU: launch shapes -------------------------------------------------------------------------


def _is_group(g: int) -> bool:
    return 1 <= g <= 1024 and (g & (g - 1) == 0 if g <= 32 else g % 32 == 0)


@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("vectorized", [True, False])
def test_norm_config_holds_every_row(itemsize: int, vectorized: bool) -> None:
    v = 16 // itemsize
    for cols in [*range(1, 300), *range(300, bw.norm_max_hidden(itemsize) + 1, 97)]:
        if vectorized and cols % v:
            continue
        for rows in (1, 7, 5000):
            cfg = bw.norm_backward_config(rows, cols, itemsize, vectorized)
            g, r = cfg.block
            n = cfg.vecs_per_thread
            assert _is_group(g) and g * r <= 1024, (cols, cfg)
            assert n in ((1, 2) if vectorized else (2,)), (cols, cfg)  # kMaxN / kScalarN
            assert n * v * g >= cols, (cols, cfg)  # the kernel's capacity test
            assert cfg.grid[0] * r <= bw.MAX_PARTIALS, (cols, rows, cfg)


@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("vectorized", [True, False])
def test_softmax_config_holds_every_row(itemsize: int, vectorized: bool) -> None:
    v = 16 // itemsize
    for cols in [*range(1, 300), *range(300, 70000, 331)]:
        if vectorized and cols % v:
            continue
        cfg = bw.softmax_backward_config(100, cols, itemsize, 132, vectorized)
        g, r = cfg.block
        assert _is_group(g) and g * r <= 1024
        if cfg.vecs_per_thread:  # register-resident: the row must fit (else the kernel streams)
            assert cfg.vecs_per_thread * v * g >= cols, (cols, cfg)
        else:
            assert cols > 4 * v * 1024, (cols, cfg)


@pytest.mark.parametrize("has_weight", [True, False])
@pytest.mark.parametrize("has_bias", [True, False])
def test_norm_launch_fits_its_workspace(has_weight: bool, has_bias: bool) -> None:
    op = "layer_norm_backward"
    for dtype in ("f32", "bf16"):
        for rows, hidden in [(1, 1), (3000, 17), (5, 4096), (16384, 4096), (100, 8192)]:
            x = fake((rows, hidden), dtype)
            # misaligned x takes the scalar layout, whose launch may differ: both must fit
            for xa in (x, x._replace(align=2)):
                w = fake((hidden,), dtype) if has_weight else None
                outs = bw.norm_backward_shapes(op, x, xa, w, has_bias)
                ws = outs[3][0]
                launches = bw.norm_backward_launch(op, x, xa, w, x, 1e-5, has_bias)
                if not (has_weight or has_bias):
                    assert ws == (0,) and len(launches) == 1
                    assert launches[0].args["ws"] is None
                    continue
                row, red = launches
                partials = row.grid[0] * row.block[1]
                assert red.args["rows"] == partials
                assert ws == (2 if has_bias else 1, ws[1]) and partials * hidden <= ws[1]
                assert red.grid == (-(-hidden // 32), 2 if has_bias else 1)
                assert red.args["dweight"] == ("dweight" if has_weight else None)
                assert red.args["dbias"] == ("dbias" if has_bias else None)
                assert row.args["flags"] == int(has_weight) | 2 * int(has_bias)


def test_elementwise_launch_layouts() -> None:
    # contiguous: one long row; a strided operand splits all three at the last dim
    (s,) = bw.elementwise_backward_launch("silu", fake((4, 6)), fake((4, 6)), fake((4, 6)), 132)
    assert s.symbol == "ak_silu_backward_bf16" and (s.args["rows"], s.args["cols"]) == (1, 24)
    strided = fake((4, 6), strides=(10, 1))
    (s,) = bw.elementwise_backward_launch("gelu", strided, fake((4, 6)), fake((4, 6)), 132)
    assert (s.args["rows"], s.args["cols"]) == (4, 6)
    assert (s.args["dy_row_stride"], s.args["x_row_stride"], s.args["out_row_stride"]) == (10, 6, 6)
    assert s.args["dy"] == "grad" and s.args["x"] == "x" and s.args["out"] == "out"
    (s,) = bw.gated_backward_launch("silu_and_mul", fake((4, 3)), fake((4, 6)), fake((4, 6)), 132)
    assert s.symbol == "ak_silu_and_mul_backward_bf16"
    assert (s.args["rows"], s.args["d"], s.args["dy_row_stride"]) == (4, 3, 3)
    assert bw.elementwise_backward_launch("relu", fake((0, 6)), fake((0, 6)), fake((0, 6)), 1) == []


# --- GPU: direct launches -------------------------------------------------------------------------


def meta(t: Any) -> Meta:
    p = t.data_ptr()
    align = 16
    while align > 1 and p % align:
        align //= 2
    return Meta(
        tuple(t.shape), tuple(t.stride()), SHORT[str(t.dtype).removeprefix("torch.")], align
    )


@functools.cache
def _fields(family: str) -> list[tuple[str, str]]:
    from aotkernels._paths import matrix_path
    from aotkernels.arch_matrix import load_matrix

    return list(load_matrix(matrix_path(), check_sources=False).families[family].params)


def _sms() -> int:
    import torch

    return int(torch.cuda.get_device_properties(0).multi_processor_count)


def launch(family: str, specs: list[bw.LaunchSpec], arrays: dict[str, Any]) -> None:
    """What the op runner does: bind arrays by name, pack the parameters, launch in order."""
    import torch

    from aotkernels.ops._common import make_plan

    stream = torch.cuda.current_stream().cuda_stream
    for s in specs:
        values: list[Any] = []
        for name, kind in _fields(family):
            v = s.args.get(name, 0)
            if kind == "ptr":
                v = 0 if v is None else arrays[str(v)].data_ptr()
            values.append(v)
        make_plan(family, s.symbol, 0, s.grid, s.block, *values)(stream)


def _nan_like(t: Any, shape: Any = None, dtype: Any = None) -> Any:
    import torch

    return torch.full(t.shape if shape is None else shape, float("nan"),
                      dtype=t.dtype if dtype is None else dtype, device=t.device)  # fmt: skip


def act_backward(kernel: str, dy: Any, x: Any, out: Any = None) -> Any:
    bw.elementwise_backward_shapes(f"{kernel}_backward", meta(dy), meta(x))
    out = _nan_like(x) if out is None else out
    specs = bw.elementwise_backward_launch(kernel, meta(dy), meta(x), meta(out), _sms())
    launch("activation", specs, {"grad": dy, "x": x, "out": out})
    return out


def gated_backward(kernel: str, dy: Any, x: Any, out: Any = None) -> Any:
    bw.gated_backward_shapes(f"{kernel}_backward", meta(dy), meta(x))
    out = _nan_like(x) if out is None else out
    specs = bw.gated_backward_launch(kernel, meta(dy), meta(x), meta(out), _sms())
    launch("gated", specs, {"grad": dy, "x": x, "out": out})
    return out


def softmax_backward(dy: Any, y: Any, out: Any = None) -> Any:
    bw.softmax_backward_shapes("softmax_backward", meta(dy), meta(y))
    out = _nan_like(y) if out is None else out
    specs = bw.softmax_backward_launch(meta(dy), meta(y), meta(out), _sms())
    launch("softmax", specs, {"grad": dy, "y": y, "out": out})
    return out


def norm_backward(
    op: str, dy: Any, x: Any, w: Any, eps: float, has_bias: bool = False, out: Any = None
) -> tuple[Any, Any, Any]:
    """(dx, dweight or None, dbias or None), outputs and workspace NaN-poisoned."""
    import torch

    wm = None if w is None else meta(w)
    outs = bw.norm_backward_shapes(op, meta(dy), meta(x), wm, has_bias)
    dx = _nan_like(x) if out is None else out
    dw = None if w is None else _nan_like(x, (x.shape[-1],))
    db = _nan_like(x, (x.shape[-1],)) if has_bias else None
    ws = _nan_like(x, outs[3][0], torch.float32)
    specs = bw.norm_backward_launch(op, meta(dy), meta(x), wm, meta(dx), eps, has_bias)
    launch("norm", specs, {"grad": dy, "x": x, "weight": w, "out": dx, "ws": ws,
                           "dweight": dw, "dbias": db})  # fmt: skip
    return dx, dw, db


# --- references: float64 autograd ------------------------------------------------------------


def _act64(kernel: str, t: Any) -> Any:
    import torch
    import torch.nn.functional as F

    fns = {
        "relu": torch.relu,
        "gelu": F.gelu,
        "gelu_tanh": lambda a: F.gelu(a, approximate="tanh"),
        "silu": F.silu,
        "sigmoid": torch.sigmoid,
    }
    return fns[kernel](t)


def grads64(f: Any, dy: Any, *inputs: Any) -> list[Any]:
    """d(sum(f(*inputs) * dy)) / d(input) for each input, in float64."""
    leaves = [None if t is None else t.double().requires_grad_() for t in inputs]
    f(*leaves).backward(dy.double())
    return [None if t is None else t.grad for t in leaves]


def check(out: Any, ref: Any, what: str, scale: float | None = None) -> None:
    """``out`` within the dtype's tolerance of ``ref``; the absolute part is relative to
    ``scale``, by default the largest |ref|."""
    import torch

    rtol, atol = TOLERANCES[str(out.dtype).removeprefix("torch.")]
    if scale is None:
        scale = float(ref.abs().max()) if ref.numel() else 0.0
    torch.testing.assert_close(out.double(), ref, rtol=rtol, atol=atol * max(scale, 1e-30),
                               msg=lambda m: f"{what}: {m}")  # fmt: skip


def _randn(shape: Any, dtype: str, scale: float = 1.0, seed: int = 0) -> Any:
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    t = torch.randn(shape, generator=g, device="cuda", dtype=torch.float32) * scale
    return t.to(getattr(torch, dtype))


# --- GPU: activation / gated ---------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", ACTIVATIONS)
@pytest.mark.parametrize("cols", ODD_COLS)
def test_activation_backward(kernel: str, dtype: str, cols: int) -> None:
    # x spans the activations' interesting range (tails included: |x| up to ~20)
    x = _randn((3, cols), dtype, 4.0, seed=cols)
    dy = _randn((3, cols), dtype, 1.0, seed=cols + 1)
    dx = act_backward(kernel, dy, x)
    (ref,) = grads64(lambda t: _act64(kernel, t), dy, x)
    check(dx, ref, f"{kernel}_backward {dtype} cols={cols}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", ACTIVATIONS)
def test_activation_backward_strided_and_misaligned(kernel: str, dtype: str) -> None:
    import torch

    rows, cols = 37, 1000
    x = _randn((rows, cols + 24), dtype, 4.0)[:, 8 : 8 + cols]  # aligned, row stride 1024
    dy = _randn((rows * cols + 1,), dtype, seed=1)[1:].view(rows, cols)  # misaligned: scalar
    wide = _nan_like(x, (rows, cols + 16))
    out = wide[:, :cols]
    act_backward(kernel, dy, x, out)
    (ref,) = grads64(lambda t: _act64(kernel, t), dy, x)
    check(out, ref, f"{kernel}_backward {dtype} strided")
    assert torch.isnan(wide[:, cols:]).all(), "wrote outside out's rows"
    # all three contiguous and aligned: the one-long-row vector path
    xc, dyc = x.contiguous(), dy.contiguous()
    check(act_backward(kernel, dyc, xc), ref, f"{kernel}_backward {dtype} contiguous")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_activation_backward_special_values(dtype: str) -> None:
    import torch

    vals = [0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0, 80.0, -80.0, 100.0, -100.0, float("nan")]
    x = torch.tensor(vals, device="cuda").to(getattr(torch, dtype))
    dy = torch.ones_like(x)
    for kernel in ACTIVATIONS:
        dx = act_backward(kernel, dy, x)
        (ref,) = grads64(lambda t, k=kernel: _act64(k, t), dy, x)
        finite = torch.isfinite(ref)
        check(dx[finite], ref[finite], f"{kernel}_backward {dtype} special values")
        assert torch.equal(torch.isnan(dx), torch.isnan(ref)), (kernel, dx, ref)
    # relu passes dy where x > 0 only, even when dy is NaN (a select, as torch's)
    dyn = torch.full_like(x, float("nan"))
    dx = act_backward("relu", dyn, x)
    assert (dx[:2] == 0).all() and torch.isnan(dx[4])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", GATED)
@pytest.mark.parametrize("d", ODD_COLS)
def test_gated_backward(kernel: str, dtype: str, d: int) -> None:
    act = {"silu_and_mul": "silu", "gelu_and_mul": "gelu", "gelu_tanh_and_mul": "gelu_tanh"}
    x = _randn((5, 2 * d), dtype, 3.0, seed=d)
    dy = _randn((5, d), dtype, seed=d + 1)
    dx = gated_backward(kernel, dy, x)
    (ref,) = grads64(lambda t: _act64(act[kernel], t[..., :d]) * t[..., d:], dy, x)
    check(dx, ref, f"{kernel}_backward {dtype} d={d}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", GATED)
def test_gated_backward_strided(kernel: str, dtype: str) -> None:
    import torch

    act = {"silu_and_mul": "silu", "gelu_and_mul": "gelu", "gelu_tanh_and_mul": "gelu_tanh"}
    rows, d = 33, 512
    x = _randn((rows, 2 * d + 64), dtype, 3.0)[:, 32 : 32 + 2 * d]
    dy = _randn((rows, d + 8), dtype, seed=2)[:, :d]
    wide = _nan_like(x, (rows, 2 * d + 8))
    out = wide[:, : 2 * d]
    gated_backward(kernel, dy, x, out)
    (ref,) = grads64(lambda t: _act64(act[kernel], t[..., :d]) * t[..., d:], dy, x)
    check(out, ref, f"{kernel}_backward {dtype} strided")
    assert torch.isnan(wide[:, 2 * d :]).all()


# --- GPU: softmax -------------------------------------------------------------------------------


def _softmax_inputs(shape: Any, dtype: str, seed: int = 0) -> tuple[Any, Any]:
    import torch

    x = _randn(shape, "float32", 3.0, seed=seed)
    y = torch.softmax(x.double(), -1).to(getattr(torch, dtype))
    return _randn(shape, dtype, seed=seed + 1), y


def _softmax_ref(dy: Any, y: Any) -> Any:
    """torch's own softmax backward (what autograd runs) in float64 on the rounded y."""
    import torch

    return torch.ops.aten._softmax_backward_data(dy.double(), y.double(), -1, torch.float64)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [*ODD_COLS, 4096, 16384 + 8, 40000, 40001])
def test_softmax_backward(dtype: str, cols: int) -> None:
    # 16392 / 40000 columns: beyond the register path (f32 / 16-bit), both rows streamed;
    # 40001: the scalar layout streamed.
    dy, y = _softmax_inputs((7, cols), dtype, seed=cols)
    check(softmax_backward(dy, y), _softmax_ref(dy, y), f"softmax_backward {dtype} cols={cols}")


@pytest.mark.gpu
def test_softmax_backward_f32_matches_autograd_of_softmax() -> None:
    """The f32 kernel against autograd through softmax itself (x -> y -> dx) in float64."""
    import torch

    x = _randn((9, 1000), "float32", 3.0)
    dy = _randn((9, 1000), "float32", seed=3)
    (ref,) = grads64(lambda t: torch.softmax(t, -1), dy, x)
    y = torch.softmax(x.double(), -1).float()
    check(softmax_backward(dy, y), ref, "softmax_backward f32 vs autograd")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [111, 4096])
def test_softmax_backward_strided_misaligned_and_nan(dtype: str, cols: int) -> None:
    import torch

    rows = 40
    _, y_full = _softmax_inputs((rows, cols + 16), dtype)
    y = y_full[:, :cols]  # strided rows (the values no longer sum to 1: the formula still holds)
    dy = _randn((rows * cols + 3,), dtype, seed=5)[3:].view(rows, cols)  # misaligned
    wide = _nan_like(y, (rows, cols + 8))
    out = wide[:, :cols]
    softmax_backward(dy, y, out)
    check(out, _softmax_ref(dy, y), f"softmax_backward {dtype} strided")
    assert torch.isnan(wide[:, cols:]).all()
    # a NaN in one row's dy poisons that row only
    dyn = dy.clone()
    dyn[3, 5] = float("nan")
    dx = softmax_backward(dyn, y.contiguous())
    assert torch.isnan(dx[3]).all() and not torch.isnan(dx[torch.arange(rows) != 3]).any()


# --- GPU: rms_norm / layer_norm ----------------------------------------------------------------


def _rms64(x: Any, w: Any, eps: float) -> Any:
    y = x * (x.square().mean(-1, keepdim=True) + eps).rsqrt()
    return y if w is None else y * w


def _ln64(x: Any, w: Any, b: Any, eps: float) -> Any:
    import torch.nn.functional as F

    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


NORM_COLS = [*ODD_COLS, 4096, 8192, 16384]


def _dx_scale(x: Any, w: Any, dy: Any, eps: float) -> float:
    """The size of the terms dx is a difference of (rstd * w * dy): with short rows they cancel
    almost exactly (one column: rms_norm's dx is w * dy * rstd * eps / (x^2 + eps)), and the f32
    error is relative to them, not to the difference. The larger of the two norms' rstd."""
    import torch

    xd = x.double()
    rstd = torch.maximum(
        (xd.var(-1, unbiased=False, keepdim=True) + eps).rsqrt(),
        (xd.square().mean(-1, keepdim=True) + eps).rsqrt(),
    )
    g = dy.double() if w is None else dy.double() * w.double()
    return float((rstd * g).abs().max())


def _norm_case(op: str, dtype: str, rows: int, cols: int, weight: bool, bias: bool) -> None:
    if cols > bw.norm_max_hidden(4 if dtype == "float32" else 2):
        pytest.skip("beyond the register-resident rows (NotImplementedError, tested on CPU)")
    x = _randn((rows, cols), dtype, 2.0, seed=cols) + (0.5 if op == "layer_norm_backward" else 0)
    dy = _randn((rows, cols), dtype, seed=cols + 1)
    w = _randn((cols,), dtype, seed=cols + 2) + 1.0 if weight else None
    b = _randn((cols,), dtype, seed=cols + 3) if bias else None
    eps = 1e-6 if op == "rms_norm_backward" else 1e-5
    dx, dw, db = norm_backward(op, dy, x, w, eps, has_bias=bias)
    if op == "rms_norm_backward":
        rx, rw = grads64(lambda a, c: _rms64(a, c, eps), dy, x, w)
        rb = None
    else:
        rx, rw, rb = grads64(lambda a, c, e: _ln64(a, c, e, eps), dy, x, w, b)
    what = f"{op} {dtype} {rows}x{cols} weight={weight} bias={bias}"
    check(dx, rx, what + " dx", _dx_scale(x, w, dy, eps))
    if weight and op == "layer_norm_backward" and cols == 1:
        # a one-element row normalizes to 0: dweight is exactly 0 (the float64 reference
        # carries ~1e-14 of rounding)
        assert not dw.any(), what
    elif weight:
        check(dw, rw, what + " dweight")
    if bias:
        check(db, rb, what + " dbias")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", NORM_COLS)
def test_rms_norm_backward(dtype: str, cols: int) -> None:
    _norm_case("rms_norm_backward", dtype, 6, cols, True, False)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", NORM_COLS)
def test_layer_norm_backward(dtype: str, cols: int) -> None:
    _norm_case("layer_norm_backward", dtype, 6, cols, True, True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("op", "weight", "bias"), [
    ("rms_norm_backward", False, False),
    ("layer_norm_backward", False, False),
    ("layer_norm_backward", True, False),
    ("layer_norm_backward", False, True),
])  # fmt: skip
def test_norm_backward_optional_params(dtype: str, op: str, weight: bool, bias: bool) -> None:
    _norm_case(op, dtype, 9, 1000, weight, bias)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["rms_norm_backward", "layer_norm_backward"])
@pytest.mark.parametrize("cols", [17, 4096])
def test_norm_backward_many_rows_per_group(op: str, dtype: str, cols: int) -> None:
    """More rows than row groups: each thread's column sums run over several rows."""
    _norm_case(op, dtype, 3000, cols, True, op == "layer_norm_backward")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["rms_norm_backward", "layer_norm_backward"])
@pytest.mark.parametrize("cols", [97, 2048])
def test_norm_backward_strided_and_misaligned(op: str, dtype: str, cols: int) -> None:
    import torch

    rows = 50
    x = _randn((rows, cols + 40), dtype, 2.0)[:, 16 : 16 + cols]
    dy = _randn((rows * cols + 1,), dtype, seed=7)[1:].view(rows, cols)  # misaligned: scalar
    w = _randn((cols,), dtype, seed=8) + 1.0
    has_bias = op == "layer_norm_backward"
    wide = _nan_like(x, (rows, cols + 8))
    dx, dw, db = norm_backward(op, dy, x, w, 1e-5, has_bias, out=wide[:, :cols])
    if op == "rms_norm_backward":
        rx, rw = grads64(lambda a, c: _rms64(a, c, 1e-5), dy, x, w)
    else:
        b = torch.zeros_like(w)  # its value does not enter any gradient
        rx, rw, rb = grads64(lambda a, c, e: _ln64(a, c, e, 1e-5), dy, x, w, b)
        check(db, rb, f"{op} {dtype} strided dbias")
    check(dx, rx, f"{op} {dtype} strided dx", _dx_scale(x, w, dy, 1e-5))
    check(dw, rw, f"{op} {dtype} strided dweight")
    assert torch.isnan(wide[:, cols:]).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["rms_norm_backward", "layer_norm_backward"])
@pytest.mark.parametrize(("rows", "cols"), [(4097, 17), (2000, 4096), (64, 8192)])
def test_norm_backward_bitwise_repeatable(op: str, dtype: str, rows: int, cols: int) -> None:
    import torch

    if cols > bw.norm_max_hidden(4 if dtype == "float32" else 2):
        pytest.skip("beyond the register-resident rows")
    x = _randn((rows, cols), dtype, 2.0)
    dy = _randn((rows, cols), dtype, seed=1)
    w = _randn((cols,), dtype, seed=2)
    has_bias = op == "layer_norm_backward"
    a = norm_backward(op, dy, x, w, 1e-5, has_bias)
    b = norm_backward(op, dy, x, w, 1e-5, has_bias)
    for name, p, q in zip(("dx", "dweight", "dbias"), a, b, strict=True):
        if p is not None:
            bits = torch.int16 if p.element_size() == 2 else torch.int32
            assert not torch.isnan(p).any(), name
            assert torch.equal(p.view(bits), q.view(bits)), name


@pytest.mark.gpu
def test_norm_backward_empty_launches_nothing() -> None:
    m = meta(_randn((0, 64), "bfloat16"))
    assert bw.norm_backward_launch("rms_norm_backward", m, m, None, m, 1e-6) == []
    ws = bw.norm_backward_shapes("layer_norm_backward", m, m, None, True)[3][0]
    assert math.prod(ws) == 0
