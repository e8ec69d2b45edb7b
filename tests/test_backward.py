"""Backward ops: activation, gated, softmax, rms_norm and layer_norm gradients.

CPU: the declarations' shape rules (typed errors, output and workspace shapes), the capacity of
every launch shape the heuristics produce, the workspace against the launches that use it, the
torch schemas and fake implementations.
GPU: every backward op x dtype against float64 torch autograd of the reference formula on the
same (already rounded) inputs: odd sizes, strided and misaligned rows, NaN-poisoned outputs and
workspace (the declaration's launches run on caller buffers filled with NaN, so an element a
kernel fails to write fails the comparison), bitwise repeatability of dweight / dbias, autograd
through the forward ops, torch.library.opcheck.
"""

from __future__ import annotations

from typing import Any

import pytest

import aotkernels as ak
from aotkernels.ops import _backward as bw
from aotkernels.ops import _op
from aotkernels.ops._op import REGISTRY, Args, Meta
from helpers import reference

DTYPES = ["float32", "float16", "bfloat16"]
SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
ODD_COLS = [1, 17, 97, 111, 1025, 4097]
ACTIVATIONS = ["relu", "gelu", "gelu_tanh", "silu", "sigmoid"]
GATED = ["silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"]
BACKWARD_OPS = [
    "relu_backward", "gelu_backward", "silu_backward", "sigmoid_backward",
    "silu_and_mul_backward", "gelu_and_mul_backward", "softmax_backward",
    "rms_norm_backward", "layer_norm_backward",
]  # fmt: skip

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


def fake(shape: tuple[int, ...], dtype: str = "bf16", strides: Any = None, align: int = 16) -> Meta:
    if strides is None:
        strides, step = [], 1
        for n in reversed(shape):
            strides.insert(0, step)
            step *= n
    return Meta(tuple(shape), tuple(strides), dtype, align)


class _Args(Args):
    sm_count = 132  # launch rules asked off the device


def args(name: str, outs: dict[str, Meta] | None = None, **given: Any) -> Args:
    """The Args a rule of op ``name`` sees: arrays (Meta) and attributes by name."""
    op = REGISTRY[name]
    metas = {t.name: given.get(t.name) for t in op.inputs}
    attrs = {a.name: given.get(a.name, a.default) for a in op.attrs}
    return _Args(op, metas, attrs, -1, outs)


def shapes(name: str, **given: Any) -> tuple[Any, ...]:
    return tuple(REGISTRY[name].shapes(args(name, **given)))


# --- CPU: shape rules ----------------------------------------------------------------------------


def test_elementwise_shapes_and_errors() -> None:
    x = fake((4, 6))
    assert shapes("silu_backward", grad=fake((4, 6)), x=x) == (((4, 6), "bf16"),)
    with pytest.raises(TypeError, match=r"silu_backward: x.dtype must be one of float32"):
        shapes("silu_backward", grad=fake((4, 6), "int8"), x=fake((4, 6), "int8"))
    with pytest.raises(TypeError, match=r"silu_backward: grad.dtype must be bfloat16 \(the dtype"):
        shapes("silu_backward", grad=fake((4, 6), "f32"), x=x)
    with pytest.raises(ValueError, match=r"silu_backward: grad.shape must be \(4, 6\)"):
        shapes("silu_backward", grad=fake((4, 5)), x=x)
    with pytest.raises(ValueError, match=r"silu_backward: x must have a contiguous last dim"):
        shapes("silu_backward", grad=fake((4, 6)), x=fake((4, 6), strides=(1, 4)))
    with pytest.raises(ValueError, match=r"grad's leading dimensions must collapse"):
        shapes("silu_backward", grad=fake((2, 3, 6), strides=(100, 7, 1)), x=fake((2, 3, 6)))
    with pytest.raises(ValueError, match=r"gelu_backward: approximate must be 'none' or 'tanh'"):
        shapes("gelu_backward", grad=x, x=x, approximate="erf")


def test_gated_and_softmax_shapes() -> None:
    g, x = fake((3, 4)), fake((3, 8))
    assert shapes("silu_and_mul_backward", grad=g, x=x) == (((3, 8), "bf16"),)
    with pytest.raises(ValueError, match=r"x.shape\[-1\] must be even"):
        shapes("silu_and_mul_backward", grad=g, x=fake((3, 7)))
    with pytest.raises(ValueError, match=r"grad.shape must be \(3, 4\)"):
        shapes("gelu_and_mul_backward", grad=x, x=x)
    y = fake((2, 5))
    assert shapes("softmax_backward", grad=y, y=y) == (((2, 5), "bf16"),)
    with pytest.raises(TypeError, match=r"softmax_backward: grad.dtype must be bfloat16"):
        shapes("softmax_backward", grad=fake((2, 5), "f16"), y=y)
    with pytest.raises(NotImplementedError, match=r"dim must be the last dimension"):
        shapes("softmax_backward", grad=y, y=y, dim=0)


def test_norm_shapes_and_errors() -> None:
    x, w = fake((6, 32)), fake((32,))
    out = shapes("layer_norm_backward", grad=x, x=x, weight=w, bias=w)
    assert out[:3] == (((6, 32), "bf16"), ((32,), "bf16"), ((32,), "bf16"))
    assert out[3].dtype == "f32" and out[3].shape[0] == 2
    out = shapes("layer_norm_backward", grad=x, x=x)
    assert out[1:] == (((0,), "bf16"), ((0,), "bf16"), ((0,), "f32"))
    out = shapes("rms_norm_backward", grad=x, x=x, weight=w)
    assert out[:2] == (((6, 32), "bf16"), ((32,), "bf16")) and out[2].shape[0] == 1
    with pytest.raises(ValueError, match=r"weight.shape must be \(32,\)"):
        shapes("rms_norm_backward", grad=x, x=x, weight=fake((31,)))
    with pytest.raises(TypeError, match=r"weight.dtype must be bfloat16"):
        shapes("rms_norm_backward", grad=x, x=x, weight=fake((32,), "f32"))
    with pytest.raises(ValueError, match=r"weight must be contiguous"):
        shapes("layer_norm_backward", grad=x, x=x, weight=fake((32,), strides=(2,)))
    with pytest.raises(ValueError, match=r"grad.shape must be \(6, 32\)"):
        shapes("rms_norm_backward", grad=fake((6, 31)), x=x, weight=w)
    with pytest.raises(ValueError, match=r"at least 1 dimension"):
        shapes("layer_norm_backward", grad=fake(()), x=fake(()))
    with pytest.raises(ValueError, match=r"eps must be a finite number >= 0"):
        shapes("rms_norm_backward", grad=x, x=x, weight=w, eps=-1.0)
    for dtype, cap in (("bf16", 16384), ("f16", 16384), ("f32", 8192)):
        big = fake((2, cap), dtype)
        shapes("layer_norm_backward", grad=big, x=big)
        big = fake((2, cap + 1), dtype)
        with pytest.raises(NotImplementedError, match=rf"must be <= {cap} for {dtype}"):
            shapes("layer_norm_backward", grad=big, x=big)


def test_workspace_shape_ignores_the_row_count() -> None:
    """torch's fake tensors (and dynamic batch sizes) see a workspace of hidden and dtype."""
    w = fake((4096,))
    a = shapes("rms_norm_backward", grad=fake((1, 4096)), x=fake((1, 4096)), weight=w)
    b = shapes("rms_norm_backward", grad=fake((9999, 4096)), x=fake((9999, 4096)), weight=w)
    assert a[2] == b[2]


# --- CPU: launch shapes -------------------------------------------------------------------------


def _is_group(g: int) -> bool:
    return 1 <= g <= 1024 and (g & (g - 1) == 0 if g <= 32 else g % 32 == 0)


@pytest.mark.parametrize("kernel", ["rms_norm_backward", "layer_norm_backward"])
@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("vectorized", [True, False])
def test_norm_config_holds_every_row(kernel: str, itemsize: int, vectorized: bool) -> None:
    v = 16 // itemsize
    for cols in [*range(1, 300), *range(300, bw.norm_max_hidden(itemsize) + 1, 97)]:
        if vectorized and cols % v:
            continue
        for rows in (1, 7, 5000):
            cfg = bw.norm_backward_config(kernel, rows, cols, itemsize, vectorized)
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
    for dtype in ("f32", "bf16"):
        for rows, hidden in [(1, 1), (3000, 17), (5, 4096), (16384, 4096), (100, 8192), (0, 8)]:
            x = fake((rows, hidden), dtype)
            # misaligned x takes the scalar layout, whose launch may differ: both must fit
            for xa in (x, x._replace(align=2)):
                given = {"grad": x, "x": xa}
                if has_weight:
                    given["weight"] = fake((hidden,), dtype)
                if has_bias:
                    given["bias"] = fake((hidden,), dtype)
                ws = shapes("layer_norm_backward", **given)[3].shape
                launches = REGISTRY["layer_norm_backward"].launch(
                    args("layer_norm_backward", {"out": x}, **given)
                )
                if not (has_weight or has_bias):
                    assert ws == (0,) and len(launches) == (1 if rows else 0)
                    assert all(ln.args["ws"] is None for ln in launches)
                    continue
                red = launches[-1]
                assert red.symbol == f"ak_norm_reduce_cols_{dtype}"
                assert red.grid == (-(-hidden // 32), 2 if has_bias else 1)
                assert red.args["dweight"] == ("dweight" if has_weight else None)
                assert red.args["dbias"] == ("dbias" if has_bias else None)
                if rows == 0:  # no rows: the reduction alone writes zeros
                    assert len(launches) == 1 and red.args["rows"] == 0
                    continue
                row = launches[0]
                partials = row.grid[0] * row.block[1]
                assert red.args["rows"] == partials
                assert ws == (2 if has_bias else 1, ws[1]) and partials * hidden <= ws[1]
                assert row.args["flags"] == int(has_weight) | 2 * int(has_bias)


def test_elementwise_launch_layouts() -> None:
    def launch(name: str, g: Meta, x: Meta, o: Meta) -> Any:
        (ln,) = REGISTRY[name].launch(args(name, {"out": o}, grad=g, x=x))
        return ln

    # contiguous: one long row; a strided operand splits all three at the last dim
    c = fake((4, 6))
    ln = launch("silu_backward", c, c, c)
    assert ln.symbol == "ak_silu_backward_bf16" and (ln.args["rows"], ln.args["cols"]) == (1, 24)
    ln = launch("gelu_backward", fake((4, 6), strides=(10, 1)), c, c)
    assert ln.symbol == "ak_gelu_backward_bf16"
    assert (ln.args["rows"], ln.args["cols"]) == (4, 6)
    assert (ln.args["dy_row_stride"], ln.args["x_row_stride"], ln.args["out_row_stride"]) == (
        10, 6, 6,
    )  # fmt: skip
    assert ln.args["dy"] == "grad" and ln.args["x"] == "x" and ln.args["out"] == "out"
    ln = launch("silu_and_mul_backward", fake((4, 3)), fake((4, 6)), fake((4, 6)))
    assert ln.symbol == "ak_silu_and_mul_backward_bf16"
    assert (ln.args["rows"], ln.args["d"], ln.args["dy_row_stride"]) == (4, 3, 3)
    e = fake((0, 6))
    assert REGISTRY["relu_backward"].launch(args("relu_backward", {"out": e}, grad=e, x=e)) == []


# --- CPU: torch front end -------------------------------------------------------------------------


def test_schemas() -> None:
    pytest.importorskip("torch")
    from aotkernels import _torch

    assert _torch.schema(REGISTRY["silu_backward"]) == (
        "silu_backward(Tensor grad, Tensor x) -> Tensor"
    )
    assert _torch.schema(REGISTRY["gelu_backward"]) == (
        'gelu_backward(Tensor grad, Tensor x, str approximate="none") -> Tensor'
    )
    assert _torch.schema(REGISTRY["softmax_backward"]) == (
        "softmax_backward(Tensor grad, Tensor y, int dim=-1) -> Tensor"
    )
    assert _torch.schema(REGISTRY["rms_norm_backward"]) == (
        "rms_norm_backward(Tensor grad, Tensor x, Tensor weight, float eps=1e-06) "
        "-> (Tensor, Tensor)"
    )
    assert _torch.schema(REGISTRY["layer_norm_backward"]) == (
        "layer_norm_backward(Tensor grad, Tensor x, Tensor? weight=None, Tensor? bias=None, "
        "float eps=1e-05) -> (Tensor, Tensor, Tensor)"
    )
    for name in ("relu", "gelu", "silu", "sigmoid", "silu_and_mul", "gelu_and_mul", "softmax",
                 "rms_norm", "layer_norm"):  # fmt: skip
        assert REGISTRY[name].backward is not None, name


def test_fake_impls() -> None:
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    from aotkernels import _torch

    _torch.register()
    ops = torch.ops.aotkernels
    with FakeTensorMode():
        x = torch.empty(6, 64, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(64, device="cuda", dtype=torch.bfloat16)
        assert ops.silu_backward(x, x).shape == (6, 64)
        g = torch.empty(6, 32, device="cuda", dtype=torch.bfloat16)
        assert ops.silu_and_mul_backward(g, x).shape == (6, 64)
        assert ops.softmax_backward(x, x).shape == (6, 64)
        dx, dw = ops.rms_norm_backward(x, x, w)
        assert (dx.shape, dw.shape, dw.dtype) == ((6, 64), (64,), torch.bfloat16)
        dx, dw, db = ops.layer_norm_backward(x, x, None, w)
        assert (dw.shape, db.shape) == ((0,), (64,))


# --- GPU helpers --------------------------------------------------------------------------------

_KERNEL_OPS = {  # kernel -> (op, attrs)
    "relu": ("relu_backward", {}),
    "gelu": ("gelu_backward", {}),
    "gelu_tanh": ("gelu_backward", {"approximate": "tanh"}),
    "silu": ("silu_backward", {}),
    "sigmoid": ("sigmoid_backward", {}),
    "silu_and_mul": ("silu_and_mul_backward", {}),
    "gelu_and_mul": ("gelu_and_mul_backward", {}),
    "gelu_tanh_and_mul": ("gelu_and_mul_backward", {"approximate": "tanh"}),
}


def meta(t: Any) -> Meta:
    p = t.data_ptr()
    align = 16
    while align > 1 and p % align:
        align //= 2
    return Meta(
        tuple(t.shape), tuple(t.stride()), SHORT[str(t.dtype).removeprefix("torch.")], align
    )


def run_poisoned(name: str, inputs: dict[str, Any], given: dict[str, Any], **attrs: Any) -> dict:
    """Op ``name``'s declared launches on NaN-filled output buffers (``given`` ones as passed,
    the others, workspace included, allocated here): the runner's path minus its allocation."""
    import torch

    op = REGISTRY[name]
    full = [inputs.get(t.name) for t in op.inputs]
    values = _op._bind(op, full, attrs)
    attr_map = dict(zip((a.name for a in op.attrs), values, strict=True))
    metas = {t.name: None if v is None else meta(v) for t, v in zip(op.inputs, full, strict=True)}
    specs = op.shapes(Args(op, metas, attr_map, 0))
    lead = next(v for v in full if v is not None)
    outs = {}
    for o, sp in zip(op.outputs, specs, strict=True):
        t = given.get(o.name)
        if t is None:
            dtype = {v: k for k, v in SHORT.items()}[sp.dtype]
            t = torch.full(sp.shape, float("nan"), dtype=getattr(torch, dtype), device=lead.device)
        assert (tuple(t.shape), meta(t).dtype) == (tuple(sp.shape), sp.dtype), o.name
        outs[o.name] = t
    a = Args(op, metas, attr_map, 0, {n: meta(t) for n, t in outs.items()})
    ptrs: dict[Any, int] = {None: 0}
    ptrs.update({n: v.data_ptr() for n, v in {**inputs, **outs}.items() if v is not None})
    stream = torch.cuda.current_stream().cuda_stream
    for plan, slots in _op._compile_launches(op, op.launch(a), 0):
        plan(stream, *[ptrs[n] for n in slots])
    return outs


def _nan_like(t: Any, shape: Any) -> Any:
    import torch

    return torch.full(shape, float("nan"), dtype=t.dtype, device=t.device)


def act_backward(kernel: str, dy: Any, x: Any, out: Any = None) -> Any:
    name, attrs = _KERNEL_OPS[kernel]
    return run_poisoned(name, {"grad": dy, "x": x}, {"out": out}, **attrs)["out"]


def gated_backward(kernel: str, dy: Any, x: Any, out: Any = None) -> Any:
    name, attrs = _KERNEL_OPS[kernel]
    return run_poisoned(name, {"grad": dy, "x": x}, {"out": out}, **attrs)["out"]


def softmax_backward(dy: Any, y: Any, out: Any = None) -> Any:
    return run_poisoned("softmax_backward", {"grad": dy, "y": y}, {"out": out})["out"]


def norm_backward(
    op: str, dy: Any, x: Any, w: Any, eps: float, has_bias: bool = False, out: Any = None
) -> tuple[Any, Any, Any]:
    """(dx, dweight or None, dbias or None); outputs and workspace NaN-poisoned."""
    import torch

    inputs = {"grad": dy, "x": x, "weight": w}
    if has_bias:
        inputs["bias"] = torch.zeros(x.shape[-1], dtype=x.dtype, device=x.device)
    outs = run_poisoned(op, inputs, {"out": out}, eps=eps)
    return (
        outs["out"],
        outs["dweight"] if w is not None else None,
        outs.get("dbias") if has_bias else None,
    )


# --- references: float64 autograd ------------------------------------------------------------


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
    (ref,) = grads64(lambda t: reference.activation(kernel, t, "float64"), dy, x)
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
    (ref,) = grads64(lambda t: reference.activation(kernel, t, "float64"), dy, x)
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
        (ref,) = grads64(lambda t, k=kernel: reference.activation(k, t, "float64"), dy, x)
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
    x = _randn((5, 2 * d), dtype, 3.0, seed=d)
    dy = _randn((5, d), dtype, seed=d + 1)
    (ref,) = grads64(lambda t: reference.gated(kernel, t, "float64"), dy, x)
    check(gated_backward(kernel, dy, x), ref, f"{kernel}_backward {dtype} d={d}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", GATED)
def test_gated_backward_strided(kernel: str, dtype: str) -> None:
    import torch

    rows, d = 33, 512
    x = _randn((rows, 2 * d + 64), dtype, 3.0)[:, 32 : 32 + 2 * d]
    dy = _randn((rows, d + 8), dtype, seed=2)[:, :d]
    wide = _nan_like(x, (rows, 2 * d + 8))
    out = wide[:, : 2 * d]
    gated_backward(kernel, dy, x, out)
    (ref,) = grads64(lambda t: reference.gated(kernel, t, "float64"), dy, x)
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
        rx, rw = grads64(lambda a, c: reference.rms_norm(a, c, eps), dy, x, w)
        rb = None
    else:
        rx, rw, rb = grads64(lambda a, c, e: reference.layer_norm(a, c, e, eps), dy, x, w, b)
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
        rx, rw = grads64(lambda a, c: reference.rms_norm(a, c, 1e-5), dy, x, w)
    else:
        b = torch.zeros_like(w)  # its value does not enter any gradient
        rx, rw, rb = grads64(lambda a, c, e: reference.layer_norm(a, c, e, 1e-5), dy, x, w, b)
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
def test_norm_backward_of_no_rows_is_zero() -> None:
    import torch

    x = _randn((0, 64), "bfloat16")
    w = _randn((64,), "bfloat16")
    dx, dw, db = norm_backward("layer_norm_backward", x, x, w, 1e-5, has_bias=True)
    assert dx.shape == (0, 64) and not dw.any() and not db.any()  # NaN-poisoned: all written
    dx, dw = ak.rms_norm_backward(x, x, w)
    assert dx.shape == (0, 64) and torch.equal(dw, torch.zeros_like(w))


# --- GPU: the public ops and autograd ------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_public_ops_match_the_declared_launches(dtype: str) -> None:
    """ak.<op>_backward (runner allocation, fast path on the second call) gives the bits of the
    poisoned direct launches above."""
    import torch

    x = _randn((33, 256), dtype, 3.0)
    dy = _randn((33, 256), dtype, seed=1)
    w = _randn((256,), dtype, seed=2)
    g2 = _randn((33, 128), dtype, seed=3)
    bits = torch.int16 if x.element_size() == 2 else torch.int32
    cases = [
        (lambda: ak.silu_backward(dy, x), lambda: act_backward("silu", dy, x)),
        (lambda: ak.gelu_backward(dy, x, "tanh"), lambda: act_backward("gelu_tanh", dy, x)),
        (lambda: ak.relu_backward(dy, x), lambda: act_backward("relu", dy, x)),
        (lambda: ak.sigmoid_backward(dy, x), lambda: act_backward("sigmoid", dy, x)),
        (lambda: ak.gelu_and_mul_backward(g2, x), lambda: gated_backward("gelu_and_mul", g2, x)),
        (lambda: ak.silu_and_mul_backward(g2, x), lambda: gated_backward("silu_and_mul", g2, x)),
        (lambda: ak.softmax_backward(dy, x), lambda: softmax_backward(dy, x)),
        (lambda: ak.rms_norm_backward(dy, x, w)[1],
         lambda: norm_backward("rms_norm_backward", dy, x, w, 1e-6)[1]),
        (lambda: ak.layer_norm_backward(dy, x, w, w)[2],
         lambda: norm_backward("layer_norm_backward", dy, x, w, 1e-5, True)[2]),
    ]  # fmt: skip
    for public, direct in cases:
        want = direct()
        for _ in range(2):
            assert torch.equal(public().view(bits), want.view(bits))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_autograd_through_forward_ops(dtype: str) -> None:
    """x.grad / weight.grad / bias.grad of the forward ops against float64 torch autograd."""
    import torch
    import torch.nn.functional as F

    x0 = _randn((19, 96), dtype, 2.0)
    dy = _randn((19, 96), dtype, seed=1)
    w0 = _randn((96,), dtype, seed=2) + 1.0
    b0 = _randn((96,), dtype, seed=3)
    cases = [
        ("relu", lambda x: ak.relu(x), lambda x: torch.relu(x)),
        ("gelu", lambda x: ak.gelu(x), lambda x: F.gelu(x)),
        ("gelu tanh", lambda x: ak.gelu(x, "tanh"), lambda x: F.gelu(x, approximate="tanh")),
        ("silu", lambda x: ak.silu(x), F.silu),
        ("sigmoid", lambda x: ak.sigmoid(x), torch.sigmoid),
    ]
    for what, ours, ref in cases:
        x = x0.clone().requires_grad_()
        y = ours(x)
        assert y.grad_fn is not None, what
        y.backward(dy)
        (want,) = grads64(ref, dy, x0)
        check(x.grad, want, f"autograd {what} {dtype}")

    # softmax's backward reads the saved (rounded) output: the reference does too
    x = x0.clone().requires_grad_()
    y = ak.softmax(x)
    y.backward(dy)
    check(x.grad, _softmax_ref(dy, y.detach()), f"autograd softmax {dtype}")

    g = _randn((19, 48), dtype, seed=4)
    for what, ours, ref in [
        ("silu_and_mul", ak.silu_and_mul, F.silu),
        ("gelu_and_mul", ak.gelu_and_mul, F.gelu),
    ]:
        x = _randn((19, 96), dtype, 2.0).requires_grad_()
        ours(x).backward(g)
        (want,) = grads64(lambda t, f=ref: f(t[..., :48]) * t[..., 48:], g, x.detach())
        check(x.grad, want, f"autograd {what} {dtype}")

    x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    ak.rms_norm(x, w, 1e-6).backward(dy)
    rx, rw = grads64(lambda a, c: reference.rms_norm(a, c, 1e-6), dy, x0, w0)
    check(x.grad, rx, f"autograd rms_norm dx {dtype}", _dx_scale(x0, w0, dy, 1e-6))
    check(w.grad, rw, f"autograd rms_norm dweight {dtype}")

    x, w, b = (t.clone().requires_grad_() for t in (x0, w0, b0))
    ak.layer_norm(x, w, b, 1e-5).backward(dy)
    rx, rw, rb = grads64(lambda a, c, e: reference.layer_norm(a, c, e, 1e-5), dy, x0, w0, b0)
    check(x.grad, rx, f"autograd layer_norm dx {dtype}", _dx_scale(x0, w0, dy, 1e-5))
    check(w.grad, rw, f"autograd layer_norm dweight {dtype}")
    check(b.grad, rb, f"autograd layer_norm dbias {dtype}")

    x = x0.clone().requires_grad_()  # no weight, no bias: only x's gradient
    ak.layer_norm(x).backward(dy)
    (rx,) = grads64(lambda a: reference.layer_norm(a, None, None, 1e-5), dy, x0)
    check(x.grad, rx, f"autograd layer_norm (no affine) dx {dtype}", _dx_scale(x0, None, dy, 1e-5))


@pytest.mark.gpu
def test_autograd_broadcast_grad_and_compile() -> None:
    """A broadcast incoming gradient (y.sum().backward()) and a compiled training step."""
    import torch

    x0 = _randn((8, 64), "bfloat16", 2.0)
    w0 = _randn((64,), "bfloat16", seed=1) + 1.0
    x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    ak.rms_norm(x, w).float().sum().backward()  # grad arrives as expanded ones
    rx, rw = grads64(lambda a, c: reference.rms_norm(a, c, 1e-6), torch.ones_like(x0), x0, w0)
    check(x.grad, rx, "broadcast grad dx", _dx_scale(x0, w0, torch.ones_like(x0), 1e-6))
    check(w.grad, rw, "broadcast grad dweight")

    def step(x: Any, w: Any) -> Any:
        h = ak.rms_norm(x, w)
        return ak.silu_and_mul(torch.cat([h, h * 2], -1)).float().square().sum()

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)
    grads = []
    for fn in (step, compiled):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        fn(x, w).backward()
        grads.append((x.grad, w.grad))
    for a, b in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2)  # compiled glue ops may fuse


def _opcheck_cases() -> list[tuple[str, Any]]:
    def r(*shape: int, dt: Any) -> Any:
        return _randn(shape, str(dt).removeprefix("torch."), 2.0)

    return [
        ("relu_backward", lambda dt: (r(9, 40, dt=dt), r(9, 40, dt=dt))),
        ("gelu_backward", lambda dt: (r(9, 40, dt=dt), r(9, 40, dt=dt), "tanh")),
        ("silu_backward", lambda dt: (r(9, 40, dt=dt), r(9, 40, dt=dt))),
        ("sigmoid_backward", lambda dt: (r(9, 40, dt=dt), r(9, 40, dt=dt))),
        ("silu_and_mul_backward", lambda dt: (r(7, 40, dt=dt), r(7, 80, dt=dt))),
        ("gelu_and_mul_backward", lambda dt: (r(7, 40, dt=dt), r(7, 80, dt=dt), "none")),
        ("softmax_backward", lambda dt: (r(9, 100, dt=dt), r(9, 100, dt=dt).softmax(-1), -1)),
        ("rms_norm_backward", lambda dt: (r(9, 128, dt=dt), r(9, 128, dt=dt), r(128, dt=dt))),
        (
            "layer_norm_backward",
            lambda dt: (r(9, 96, dt=dt), r(9, 96, dt=dt), r(96, dt=dt), r(96, dt=dt), 1e-5),
        ),
    ]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(("name", "make"), _opcheck_cases(), ids=lambda v: str(v)[:24])
def test_opcheck(name: str, make: Any, dtype: str) -> None:
    import torch

    from aotkernels import _torch

    _torch.register()
    torch.library.opcheck(getattr(torch.ops.aotkernels, name).default, make(getattr(torch, dtype)))


@pytest.mark.gpu
def test_jax_jit_backward_ops() -> None:
    """The backward ops under jax.jit (XLA custom calls; the norms' two launches share the
    hidden workspace) against jax.vjp of the reference formulas, f32."""
    import os

    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    try:
        from aotkernels import _xla  # noqa: F401

        if not jax.devices("cuda"):
            pytest.skip("jax sees no CUDA device")
    except (ImportError, RuntimeError) as e:
        pytest.skip(f"no jax GPU / XLA extension: {e}")

    def normal(shape: tuple[int, ...], seed: int) -> Any:
        return jax.random.normal(jax.random.key(seed), shape, jnp.float32)

    def close(got: Any, want: Any, what: str) -> None:
        """Both f32 (jax's reference too): a few ulps of each, relative to the largest."""
        import numpy

        got, want = (numpy.asarray(a, dtype=numpy.float64) for a in (got, want))
        assert abs(got - want).max() <= 2e-4 * abs(want).max(), what

    x, g, w, b = normal((37, 256), 0), normal((37, 256), 1), normal((256,), 2), normal((256,), 3)
    for name, ref in (("silu", jax.nn.silu), ("sigmoid", jax.nn.sigmoid), ("relu", jax.nn.relu)):
        want = jax.vjp(ref, x)[1](g)[0]
        got = jax.jit(lambda g, x, n=name: getattr(ak, f"{n}_backward")(g, x))(g, x)
        close(got, want, name)
    want = jax.vjp(lambda t: jax.nn.silu(t[:, :128]) * t[:, 128:], x)[1](g[:, :128])[0]
    close(jax.jit(ak.silu_and_mul_backward)(g[:, :128], x), want, "silu_and_mul")
    y = jax.nn.softmax(x, axis=-1)
    close(jax.jit(ak.softmax_backward)(g, y), y * (g - (g * y).sum(-1, keepdims=True)), "softmax")

    def rms(t: Any, c: Any) -> Any:
        return t * jax.lax.rsqrt((t * t).mean(-1, keepdims=True) + 1e-6) * c

    dx, dw = jax.jit(ak.rms_norm_backward)(g, x, w)
    want_x, want_w = jax.vjp(rms, x, w)[1](g)
    close(dx, want_x, "rms_norm dx")
    close(dw, want_w, "rms_norm dweight")

    def ln(t: Any, c: Any, e: Any) -> Any:
        mu = t.mean(-1, keepdims=True)
        var = ((t - mu) ** 2).mean(-1, keepdims=True)
        return (t - mu) * jax.lax.rsqrt(var + 1e-5) * c + e

    got = jax.jit(ak.layer_norm_backward)(g, x, w, b)
    want = jax.vjp(ln, x, w, b)[1](g)
    for i, what in enumerate(("dx", "dweight", "dbias")):
        close(got[i], want[i], f"layer_norm {what}")


def test_launch_args_carry_64_bit_strides() -> None:
    """Row strides past 2**31 elements reach every backward launch's parameter block unchanged
    (the rules' args, packed with the family's struct layout)."""
    import struct

    from helpers.fake_family import fake_family

    big = 2**31 + 8
    x, g, o = (fake((2, 128), strides=(big + i, 1)) for i in (0, 16, 32))
    half = fake((2, 64), strides=(big + 48, 1))
    w = fake((128,))
    cases = [
        ("silu_backward", {"grad": g, "x": x}, {"out": o}),
        ("silu_and_mul_backward", {"grad": half, "x": x}, {"out": o}),
        ("softmax_backward", {"grad": g, "y": x}, {"out": o}),
        ("rms_norm_backward", {"grad": g, "x": x, "weight": w}, {"out": o}),
    ]
    for name, given, outs in cases:
        op = REGISTRY[name]
        fam = fake_family(op.family, "sm_90")
        fields, fmt = fam.param_fields, fam.params.format
        for ln in op.launch(args(name, outs, **given)):
            values = [0 if t == "ptr" else ln.args.get(n, 0) for n, t in fields]
            packed = dict(zip((n for n, _ in fields), struct.unpack(fmt, struct.pack(fmt, *values)),
                              strict=True))  # fmt: skip
            if "dy_row_stride" in ln.args:
                assert packed["x_row_stride"] == big, (name, packed)
                assert packed["dy_row_stride"] == big + (48 if "and_mul" in name else 16), name
                assert packed["out_row_stride"] == big + 32, (name, packed)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_autograd_rms_norm_two_level_rows_and_gemma(dtype: str) -> None:
    """rms_norm over the q heads of a fused QKV buffer (rows that do not collapse into one
    stride: the backward reads a contiguous copy of x) and Gemma's (1 + weight)."""

    tokens, heads, d = 7, 4, 64
    qkv0 = _randn((tokens, 3 * heads * d), dtype, 2.0)
    w0 = _randn((d,), dtype, seed=1)
    dy = _randn((tokens, heads, d), dtype, seed=2)
    q0 = qkv0.view(tokens, 3 * heads, d)[:, :heads]
    for gemma in (False, True):
        qkv = qkv0.clone().requires_grad_()
        w = w0.clone().requires_grad_()
        q = qkv.view(tokens, 3 * heads, d)[:, :heads]  # strides (3 * heads * d, d, 1)
        ak.rms_norm(q, w, 1e-6, gemma=gemma).backward(dy)
        # The backward takes Gemma's (1 + weight) as an ordinary weight rounded once to the
        # weight dtype (ops/norm.py), so the reference differentiates with that rounded weight:
        # d/dweight is the same as d/d(1 + weight).
        w_eff = w0 + 1 if gemma else w0
        rx, rw = grads64(lambda a, c: reference.rms_norm(a, c, 1e-6), dy, q0, w_eff)
        grad_q = qkv.grad.view(tokens, 3 * heads, d)
        what = f"two-level rms_norm gemma={gemma} {dtype}"
        check(grad_q[:, :heads], rx, what + " dx", _dx_scale(q0, w_eff, dy, 1e-6))
        assert not grad_q[:, heads:].any(), what  # k and v get no gradient
        check(w.grad, rw, what + " dweight")
