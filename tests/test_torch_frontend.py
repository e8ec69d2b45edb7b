"""The torch front end generated from the op declarations.

CPU (torch installed, no GPU needed): schemas, fake implementations under FakeTensorMode (what
torch.compile sees), lazy registration whatever the import order.
GPU: torch.library.opcheck on every op, torch.compile(fullgraph=True) over a Llama-style block
with zero graph breaks (static and dynamic shapes, CUDA graphs), autograd through matmul, and
the clear refusal of inputs that require grad where there is no backward.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

import aotkernels as ak
from aotkernels.ops._op import REGISTRY

torch = pytest.importorskip("torch", reason="the torch front end needs torch")

from aotkernels import _torch  # noqa: E402  (imports torch: after the skip above)

ALL_OPS = sorted(REGISTRY)


def test_every_op_is_registered() -> None:
    _torch.register()
    for name in ALL_OPS:
        assert hasattr(torch.ops.aotkernels, name), name


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("relu", "relu(Tensor x) -> Tensor"),
        ("gelu", 'gelu(Tensor x, str approximate="none") -> Tensor'),
        (
            "rms_norm",
            "rms_norm(Tensor x, Tensor weight, float eps=1e-06, bool gemma=False) -> Tensor",
        ),
        (
            "fused_add_rms_norm",
            "fused_add_rms_norm(Tensor(a!) x, Tensor(b!) residual, Tensor weight, "
            "float eps=1e-06, bool gemma=False) -> ()",
        ),
        (
            "rms_norm_fp8",
            "rms_norm_fp8(Tensor x, Tensor weight, Tensor scale, float eps=1e-06, "
            "bool gemma=False, ScalarType? out_dtype=None) -> Tensor",
        ),
        (
            "fused_add_rms_norm_fp8_dynamic",
            "fused_add_rms_norm_fp8_dynamic(Tensor x, Tensor(a!) residual, Tensor weight, "
            "float eps=1e-06, bool gemma=False, ScalarType? out_dtype=None) -> (Tensor, Tensor)",
        ),
        (
            "quantize_fp8",
            "quantize_fp8(Tensor x, ScalarType? out_dtype=None, bool per_token=False, "
            "int group_size=0) -> (Tensor, Tensor)",
        ),
        (
            "layer_norm",
            "layer_norm(Tensor x, Tensor? weight=None, Tensor? bias=None, float eps=1e-05) "
            "-> Tensor",
        ),
        ("softmax", "softmax(Tensor x, int dim=-1) -> Tensor"),
        (
            "matmul",
            "matmul(Tensor a, Tensor b, Tensor? bias=None, ScalarType? out_dtype=None) -> Tensor",
        ),
        (
            "rope",
            "rope(Tensor(a!) q, Tensor(b!) k, Tensor positions, Tensor cos_sin_cache, "
            "bool is_neox=True) -> ()",
        ),
        (
            "scaled_mm",
            "scaled_mm(Tensor a, Tensor b, Tensor? scale_a=None, Tensor? scale_b=None, "
            "Tensor? bias=None, ScalarType? out_dtype=None, bool use_fast_accum=False) -> Tensor",
        ),
    ],
)
def test_schema(name: str, expected: str) -> None:
    assert _torch.schema(REGISTRY[name]) == expected


def _fake_cases() -> list[tuple[str, Any, tuple[tuple[int, ...], Any]]]:
    bf, f32 = torch.bfloat16, torch.float32

    def t(*shape: int, dtype: Any = bf) -> Any:
        return torch.empty(*shape, device="cuda", dtype=dtype)

    return [
        ("relu", lambda: (t(3, 5),), ((3, 5), bf)),
        ("gelu", lambda: (t(7, 9), "tanh"), ((7, 9), bf)),
        ("silu_and_mul", lambda: (t(4, 2, 10),), ((4, 2, 5), bf)),
        ("rms_norm", lambda: (t(6, 16), t(16), 1e-5), ((6, 16), bf)),
        ("layer_norm", lambda: (t(6, 16, dtype=f32), None, None), ((6, 16), f32)),
        ("softmax", lambda: (t(2, 3, 4),), ((2, 3, 4), bf)),
        ("matmul", lambda: (t(5, 8), t(8, 3), None, f32), ((5, 3), f32)),
        ("matmul", lambda: (t(4, 1, 5, 8), t(3, 8, 6), t(6)), ((4, 3, 5, 6), bf)),
        (
            "scaled_mm",
            lambda: (
                t(5, 32, dtype=torch.float8_e4m3fn),
                t(32, 16, dtype=torch.float8_e4m3fn),
                t(1, dtype=f32),
                t(1, dtype=f32),
                None,
                bf,
            ),
            ((5, 16), bf),
        ),
    ]


@pytest.mark.parametrize(("name", "args", "expected"), _fake_cases(), ids=lambda v: str(v)[:20])
def test_fake_impl_shapes(name: str, args: Any, expected: Any) -> None:
    """What torch.compile sees: output shape and dtype from the declaration, nothing run."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    _torch.register()
    with FakeTensorMode():
        res = getattr(torch.ops.aotkernels, name)(*args())
        assert (tuple(res.shape), res.dtype) == expected
        assert res.device.type == "cuda"


def test_fake_impl_validates() -> None:
    """The fake implementation runs the declaration's checks: a bad call fails at trace time."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    _torch.register()
    with FakeTensorMode():
        x = torch.empty(4, 7, device="cuda", dtype=torch.bfloat16)
        with pytest.raises(ValueError, match=r"silu_and_mul: x.shape\[-1\] must be even"):
            torch.ops.aotkernels.silu_and_mul(x)
        w = torch.empty(8, device="cuda", dtype=torch.bfloat16)
        with pytest.raises(ValueError, match=r"rms_norm: weight.shape must be \(7,\)"):
            torch.ops.aotkernels.rms_norm(x, w)


def _python(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()


def test_import_order_does_not_matter() -> None:
    """torch.ops.aotkernels exists whether aotkernels or torch is imported first, and
    ``import aotkernels`` alone never imports torch."""
    alone = "import sys, aotkernels; print('torch' in sys.modules)"
    assert _python(alone) == "False"
    check = "print(hasattr(torch.ops.aotkernels, 'rms_norm'))"
    assert _python(f"import aotkernels, torch; {check}") == "True"
    assert _python(f"import torch, aotkernels; {check}") == "True"


# --- GPU ---------------------------------------------------------------------------------------


def _cuda(*shape: int, dtype: Any = torch.bfloat16, scale: float = 1.0) -> Any:
    return torch.randn(*shape, device="cuda", dtype=torch.float32).mul_(scale).to(dtype)


def _opcheck_cases() -> list[tuple[str, Any]]:
    return [
        ("relu", lambda dt: (_cuda(17, 33, dtype=dt),)),
        ("gelu", lambda dt: (_cuda(17, 33, dtype=dt), "tanh")),
        ("silu", lambda dt: (_cuda(3, 64, dtype=dt),)),
        ("sigmoid", lambda dt: (_cuda(5, 9, dtype=dt),)),
        ("silu_and_mul", lambda dt: (_cuda(7, 2 * 40, dtype=dt),)),
        ("gelu_and_mul", lambda dt: (_cuda(7, 2 * 40, dtype=dt), "none")),
        ("rms_norm", lambda dt: (_cuda(9, 128, dtype=dt), _cuda(128, dtype=dt), 1e-6)),
        (
            "fused_add_rms_norm",
            lambda dt: (_cuda(9, 128, dtype=dt), _cuda(9, 128, dtype=dt), _cuda(128, dtype=dt)),
        ),
        (
            "layer_norm",
            lambda dt: (_cuda(9, 96, dtype=dt), _cuda(96, dtype=dt), _cuda(96, dtype=dt), 1e-5),
        ),
        ("softmax", lambda dt: (_cuda(9, 100, dtype=dt), -1)),
        ("matmul", lambda dt: (_cuda(33, 64), _cuda(64, 40))),
        ("matmul", lambda dt: (_cuda(3, 33, 64), _cuda(64, 40), _cuda(40))),
        (
            "rope",
            lambda dt: (
                _cuda(7, 4, 64, dtype=dt),
                _cuda(7, 2, 64, dtype=dt),
                torch.randint(0, 32, (7,), device="cuda"),
                _cuda(32, 64, dtype=torch.float32),
                True,
            ),
        ),
    ]


def _opcheck_params() -> list[tuple[str, Any, Any]]:
    """Every case in f32 and bf16, except matmul, which takes f16/bf16 operands only."""
    return [
        (name, args, dtype)
        for name, args in _opcheck_cases()
        for dtype in (torch.float32, torch.bfloat16)
        if not (name == "matmul" and dtype == torch.float32)
    ]


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "args", "dtype"), _opcheck_params(), ids=lambda v: str(v)[:20])
def test_opcheck(name: str, args: Any, dtype: Any) -> None:
    """torch.library.opcheck: schema (mutations as declared), fake vs real, autograd
    registration, and AOT dispatch with static and dynamic shapes."""
    op = getattr(torch.ops.aotkernels, name).default
    torch.library.opcheck(op, args(dtype))


@pytest.mark.gpu
def test_opcheck_scaled_mm() -> None:
    a = _cuda(33, 64).to(torch.float8_e4m3fn)
    b = _cuda(40, 64).to(torch.float8_e4m3fn).t()
    one = torch.ones(1, device="cuda")
    # use_fast_accum=False: the two-level accumulation loops; ak.scaled_mm's default.
    args = (a, b, one, one, None, torch.bfloat16, False)
    # opcheck's test_schema perturbs the inputs with arithmetic torch has no fp8 kernels for
    # ("mul_cuda" not implemented for Float8_e4m3fn); the other checks take fp8 inputs.
    checks = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    torch.library.opcheck(torch.ops.aotkernels.scaled_mm.default, args, test_utils=checks)


def _one() -> Any:
    return torch.full((1,), 0.05, device="cuda")


def _cu_seqlens() -> Any:
    return torch.tensor([0, 5, 5, 17], device="cuda", dtype=torch.int32)  # one empty sequence


def _qkv(sq: int, sk: int) -> tuple[Any, Any, Any]:
    return _cuda(2, sq, 4, 64), _cuda(2, sk, 2, 64), _cuda(2, sk, 2, 64)


def _packed() -> tuple[Any, Any, Any]:
    return _cuda(17, 4, 64), _cuda(17, 2, 64), _cuda(17, 2, 64)


def _more_opcheck_cases() -> list[tuple[str, Any]]:
    """The ops of the attention and quant families (bf16 inputs; fp8 outputs e4m3)."""
    e4m3 = torch.float8_e4m3fn
    lens = [7, 33]
    return [
        ("attention", lambda: (*_qkv(33, 40), True)),
        ("attention_lse", lambda: (*_qkv(17, 17), False, None, [8, 0])),
        ("attention_varlen", lambda: (*_packed(), _cu_seqlens(), _cu_seqlens(), 12, 12, True)),
        ("attention_varlen_lse", lambda: (*_packed(), _cu_seqlens(), _cu_seqlens(), 12, 12)),
        (
            "attention_decode",
            lambda: (
                _cuda(2, 1, 4, 64),
                _cuda(2, 40, 2, 64),
                _cuda(2, 40, 2, 64),
                torch.tensor(lens, device="cuda", dtype=torch.int32),
            ),
        ),
        ("rms_norm_fp8", lambda: (_cuda(9, 128), _cuda(128), _one(), 1e-6, False, e4m3)),
        ("rms_norm_fp8_dynamic", lambda: (_cuda(9, 128), _cuda(128), 1e-6, True, e4m3)),
        (
            "fused_add_rms_norm_fp8",
            lambda: (_cuda(9, 128), _cuda(9, 128), _cuda(128), _one(), 1e-6, False, e4m3),
        ),
        (
            "fused_add_rms_norm_fp8_dynamic",
            lambda: (_cuda(9, 128), _cuda(9, 128), _cuda(128), 1e-6, False, e4m3),
        ),
        ("layer_norm_fp8", lambda: (_cuda(9, 96), _one(), _cuda(96), _cuda(96), 1e-5, e4m3)),
        ("layer_norm_fp8_dynamic", lambda: (_cuda(9, 96), _cuda(96), None, 1e-5, e4m3)),
        ("silu_and_mul_fp8", lambda: (_cuda(7, 80), _one(), e4m3)),
        ("silu_and_mul_fp8_dynamic", lambda: (_cuda(7, 80), e4m3)),
        ("quantize_fp8", lambda: (_cuda(5, 300), e4m3, False, 128)),
        ("quantize_fp8_static", lambda: (_cuda(5, 300), _one(), e4m3)),
    ]


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "args"), _more_opcheck_cases(), ids=lambda v: str(v)[:24])
def test_opcheck_more(name: str, args: Any) -> None:
    torch.library.opcheck(getattr(torch.ops.aotkernels, name).default, args())


def test_every_op_has_an_opcheck_case() -> None:
    """A new op cannot skip opcheck: every declared op appears in one of the case lists."""
    from test_backward import _opcheck_cases as backward_cases

    covered = {n for n, _ in _opcheck_cases()} | {n for n, _ in _more_opcheck_cases()}
    covered |= {n for n, _ in backward_cases()} | {"scaled_mm"}
    assert covered == set(REGISTRY)


class _Block(torch.nn.Module):
    """A Llama-style MLP block written with our ops (plus a softmax over the logits)."""

    def __init__(self, hidden: int = 256, inter: int = 512) -> None:
        super().__init__()
        g = torch.Generator(device="cuda").manual_seed(0)

        def p(*shape: int) -> Any:
            w = torch.randn(*shape, device="cuda", generator=g) / shape[-1] ** 0.5
            return torch.nn.Parameter(w.to(torch.bfloat16), requires_grad=False)

        self.norm1, self.norm2 = p(hidden), p(hidden)
        self.up = p(inter * 2, hidden)
        self.down = p(hidden, inter)

    def forward(self, x: Any, residual: Any) -> Any:
        h = ak.rms_norm(x, self.norm1, 1e-6)
        gu = ak.matmul(h, self.up.t())
        a = ak.silu_and_mul(gu)
        y = ak.matmul(a, self.down.t())
        y, residual = ak.fused_add_rms_norm(y, residual, self.norm2, 1e-6)
        return ak.softmax(y, dim=-1), residual


@pytest.mark.gpu
@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_no_graph_breaks(dynamic: bool) -> None:
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    block = _Block()
    compiled = torch.compile(block, fullgraph=True, dynamic=dynamic)
    for tokens in (8, 24):
        x, r = _cuda(tokens, 256), _cuda(tokens, 256)
        want, want_r = block(x.clone(), r.clone())
        got, got_r = compiled(x.clone(), r.clone())
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        torch.testing.assert_close(got_r, want_r, rtol=0, atol=0)
    assert dict(counters["graph_break"]) == {}


@pytest.mark.gpu
def test_compile_reduce_overhead_cuda_graphs() -> None:
    torch._dynamo.reset()
    ak.preload()
    block = _Block()
    compiled = torch.compile(block, mode="reduce-overhead", fullgraph=True)
    x, r = _cuda(16, 256), _cuda(16, 256)
    want, _ = block(x.clone(), r.clone())
    for _ in range(3):  # warm-up, record, replay
        got, _ = compiled(x.clone(), r.clone())
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.gpu
def test_matmul_autograd_matches_torch() -> None:
    """f32 reference: torch's own autograd of a @ b on the same (bf16-valued) operands."""
    a = _cuda(37, 64).requires_grad_()
    b = _cuda(64, 29).requires_grad_()
    g = _cuda(37, 29)
    y = ak.matmul(a, b)
    assert y.grad_fn is not None
    y.backward(g)
    a32 = a.detach().float().requires_grad_()
    b32 = b.detach().float().requires_grad_()
    (a32 @ b32).backward(g.float())
    # dA and dB are bf16 GEMMs over 29 / 37 terms of bf16 products with f32 accumulation,
    # rounded once to bf16: half a bf16 ulp (2**-9) relative plus accumulation noise.
    torch.testing.assert_close(a.grad.float(), a32.grad, rtol=8e-3, atol=1e-2)
    torch.testing.assert_close(b.grad.float(), b32.grad, rtol=8e-3, atol=1e-2)


@pytest.mark.gpu
def test_no_backward_is_a_clear_error_never_a_detached_result() -> None:
    x = _cuda(4, 64).requires_grad_()
    r, w = _cuda(4, 64), _cuda(64)
    with pytest.raises(NotImplementedError, match="fused_add_rms_norm: x requires grad"):
        ak.fused_add_rms_norm(x, r, w)
    with pytest.raises(NotImplementedError, match="out= results have no autograd"):
        ak.rms_norm(x, w, out=torch.empty_like(x))
    a = _cuda(16, 64).to(torch.float8_e4m3fn)
    with torch.no_grad():  # the same calls are fine without grad
        ak.rms_norm(x, w, out=torch.empty_like(x))
    b = _cuda(16, 64).to(torch.float8_e4m3fn).t()
    one = torch.ones(1, device="cuda", requires_grad=True)
    with pytest.raises(NotImplementedError, match="scaled_mm: scale_a requires grad"):
        ak.scaled_mm(a, b, one, one.detach(), out_dtype=torch.bfloat16)
