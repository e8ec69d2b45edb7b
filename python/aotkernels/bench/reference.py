"""What each op computes, written once in torch: the references of the tests and the benchmarks.

Every formula takes torch tensors and computes in ``dtype`` (float64 unless said otherwise, so
that the reference's own rounding is far below any kernel's; None: the inputs' own dtype, the
formula a model runs, which the benchmarks time as an anchor), from the inputs as stored: a
kernel reads the same rounded values. The tolerance tables say how far a kernel's result may be
from its reference, per family and storage dtype, with the reason for each bound; ``close``
applies one. torch is imported inside the functions: importing this module costs nothing, and
``aotkernels bench`` checks its results with it from an installed wheel.
"""

from __future__ import annotations

import math
from typing import Any

# (rtol, atol) per family and storage dtype (float32, float16, bfloat16); ``close`` reads them.
# In every family, f16 and bf16 results are rounded once from f32: half an ulp is 2**-11 ~ 4.9e-4
# (f16) and 2**-9 ~ 2e-3 (bf16) relative, and the f32 error may flip a tie, hence one full ulp
# (bf16 with margin: 8e-3). What differs is the f32 part and the absolute floor:
# - elementwise (activations and gated, against the fp32 formula): expf/erff/tanhf may differ
#   from torch's by an ulp or two of f32; near zero, GELU's 1 + tanh(z) / 1 + erf(z) cancel, so
#   the error there is absolute, ~ulp(1) * |x|.
# - norm (rms_norm, fused_add_rms_norm, layer_norm against fp64; outputs O(1), normalized values
#   times weights ~ N(0, 1)): f32 sums of up to 1e5 squares (fixed-order tree: per-thread lanes,
#   shuffles) differ from fp64 by ~sqrt(n) ulps; rsqrtf and __fdividef add 2 ulps each: ~1e-5
#   relative at 65536.
# - softmax (against fp64): exp2f (2 ulp) of an FFMA-rounded argument, |x - max| * 2**-24
#   relative, ~1e-6 for the spreads tested; the f32 row sum adds ~sqrt(n) ulps; __fdividef 2
#   ulps. Probabilities under 6e-5 are f16 subnormals with an absolute spacing of 6e-8.
# - rope (against the fp32 formula on the same rounded inputs): f32 math, a few ulps (FMA
#   contraction differs from torch's separate multiply and add); atol for results that cancel.
# - attention (against the fp32 reference, inputs ~ N(0, 1)): as FlashAttention, the kernel
#   rounds the probabilities P (in [0, 1]) to the storage dtype before P V: each term p_j v_j
#   carries a relative error up to half an ulp u (f16 2**-11, bf16 2**-8 with its 8-bit
#   significand), so |err| <= u * sum_j p_j |v_j| <= u * max|v| ~ 4.5 u for N(0, 1) values (and
#   typically far less: the errors are independent); the output is rounded once more (another
#   u). f16: 4.5 * 2**-11 ~ 2.2e-3 -> atol 3e-3, rtol 2e-3; bf16: 4.5 * 2**-8 ~ 1.8e-2 -> atol
#   2e-2, rtol 1e-2.
_F32, _F16, _BF16 = "float32", "float16", "bfloat16"
TOLERANCES: dict[str, dict[str, tuple[float, float]]] = {
    "elementwise": {_F32: (1e-5, 1e-6), _F16: (1e-3, 1e-6), _BF16: (8e-3, 1e-6)},
    "norm": {_F32: (2e-5, 2e-5), _F16: (1e-3, 1e-5), _BF16: (8e-3, 1e-5)},
    "softmax": {_F32: (2e-5, 1e-7), _F16: (1e-3, 1e-7), _BF16: (8e-3, 1e-7)},
    "rope": {_F32: (1e-5, 1e-5), _F16: (1e-3, 1e-5), _BF16: (8e-3, 1e-5)},
    "attention": {_F16: (2e-3, 3e-3), _BF16: (1e-2, 2e-2)},
}

# fp8: the largest finite value, half an ulp (relative) and the smallest subnormal step.
FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
FP8_HALF_ULP = {"float8_e4m3fn": 2.0**-4, "float8_e5m2": 2.0**-3}
FP8_SUBNORMAL = {"float8_e4m3fn": 2.0**-9, "float8_e5m2": 2.0**-16}
MIN_AMAX = 1e-10  # dynamic scales: max(amax, MIN_AMAX) / fp8 max, so an all-zero row divides
# The relative error of the f32 value a quantizing kernel rounds to fp8, against fp64: the
# norms' row sums and rsqrt, silu's expf and division, none for a plain quantize (one division).
FP8_DELTA = {"norm": 4e-5, "silu_and_mul": 5e-5, "quantize": 1e-6}


def _dt(dtype: Any, like: Any) -> Any:
    """The torch dtype ``dtype`` names; ``like``'s own dtype for None."""
    import torch

    if dtype is None:
        return like.dtype
    return getattr(torch, dtype) if isinstance(dtype, str) else dtype


def dtype_name(dtype: Any) -> str:
    """``"bfloat16"`` for ``torch.bfloat16`` or ``"bfloat16"``: the tables' key."""
    return str(dtype).removeprefix("torch.")


# --- comparison -------------------------------------------------------------------------------


def close(got: Any, want: Any, family: str) -> str:
    """``""`` when ``got`` is within the family's tolerance for got's dtype of ``want`` (NaN only
    where want is NaN), else what differs: the count, the worst element and its bound."""
    rtol, atol = TOLERANCES[family][dtype_name(got.dtype)]
    g, w = got.double(), want.double()
    bound = atol + rtol * w.abs()
    err = (g - w).abs()
    bad = ~(err <= bound) & ~(g.isnan() & w.isnan())
    if not bad.any():
        return ""
    worst = int(((err - bound) / bound).nan_to_num(math.inf).argmax())
    at = tuple(int(i) for i in _unravel(worst, tuple(got.shape)))
    return (
        f"{int(bad.sum())} of {got.numel()} elements beyond rtol {rtol:g} atol {atol:g}, e.g. "
        f"at {at}: got {g.flatten()[worst].item():.6g} want {w.flatten()[worst].item():.6g}"
    )


def _unravel(i: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for n in reversed(shape):
        out.append(i % n)
        i //= n
    return out[::-1]


def rel_err(ours: Any, ref: Any) -> float:
    """||ours - ref|| / ||ref|| in float64 (0.0 when exact, as int8 should be)."""
    d = ours.double() - ref.double()
    return float(d.norm() / ref.double().norm().clamp_min(1e-30))


# --- elementwise ------------------------------------------------------------------------------

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid")
GATED = {"silu_and_mul": "silu", "gelu_and_mul": "gelu", "gelu_tanh_and_mul": "gelu_tanh"}


def activation(op: str, x: Any, dtype: Any = "float32") -> Any:
    """relu, gelu (erf), gelu_tanh, silu or sigmoid of ``x``, in ``dtype`` (autograd-able)."""
    import torch
    import torch.nn.functional as F

    fns = {
        "relu": torch.relu,
        "gelu": F.gelu,
        "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
        "silu": F.silu,
        "sigmoid": torch.sigmoid,
    }
    return fns[op](x.to(_dt(dtype, x)))


def gated(op: str, x: Any, dtype: Any = "float32") -> Any:
    """``act(x[..., :d]) * x[..., d:]`` for ``op`` = ``<act>_and_mul``, in ``dtype``."""
    d = x.shape[-1] // 2
    return activation(GATED[op], x[..., :d], dtype) * x[..., d:].to(_dt(dtype, x))


# --- row-wise ---------------------------------------------------------------------------------


def rms_norm(
    x: Any, w: Any = None, eps: float = 1e-6, *, gemma: bool = False, dtype: Any = "float64"
) -> Any:
    """``x * rsqrt(mean(x**2, -1) + eps) * w`` (Gemma: ``* (1 + w)``), in ``dtype``."""
    xd = x.to(_dt(dtype, x))
    y = xd * (xd.square().mean(-1, keepdim=True) + eps).rsqrt()
    if w is None:
        return y
    return y * (w.to(xd.dtype) + (1.0 if gemma else 0.0))


def fused_add_rms_norm(
    x: Any, r: Any, w: Any, eps: float = 1e-6, *, gemma: bool = False, dtype: Any = "float64"
) -> tuple[Any, Any]:
    """(normalized, residual): the sum ``x + r`` computed in f32 and rounded to the storage dtype
    (vLLM's convention, what the kernel writes to the residual), then normalized."""
    s = (x.float() + r.float()).to(x.dtype)
    return rms_norm(s, w, eps, gemma=gemma, dtype=dtype), s


def layer_norm(
    x: Any, w: Any = None, b: Any = None, eps: float = 1e-5, *, dtype: Any = "float64"
) -> Any:
    """``(x - mean) * rsqrt(var + eps) * w + b`` over the last dim (biased var), in ``dtype``."""
    xd = x.to(_dt(dtype, x))
    mu = xd.mean(-1, keepdim=True)
    y = (xd - mu) * ((xd - mu).square().mean(-1, keepdim=True) + eps).rsqrt()
    if w is not None:
        y = y * w.to(xd.dtype)
    return y if b is None else y + b.to(xd.dtype)


def softmax(x: Any, dtype: Any = "float64") -> Any:
    """softmax over the last dim, with the kernels' contract for fully masked (-inf) rows: 0."""
    import torch

    y = torch.softmax(x.to(_dt(dtype, x)), dim=-1)
    masked = (x == float("-inf")).all(dim=-1, keepdim=True)
    return torch.where(masked, torch.zeros_like(y), y)


# --- fp8 --------------------------------------------------------------------------------------


def fp8_dynamic_scale(y: Any, fp8: str, dims: Any = -1) -> Any:
    """``max(amax, MIN_AMAX) / fp8 max`` over ``dims`` (kept), or over all of y for None."""
    amax = y.abs().amax() if dims is None else y.abs().amax(dim=dims, keepdim=True)
    return amax.clamp_min(MIN_AMAX) / FP8_MAX[fp8]


def fp8_dequantized_error(
    q: Any, scale: Any, y: Any, fp8: str, delta: float, abs_delta: float = 0.0
) -> tuple[Any, Any]:
    """(error, bound) per element of ``q * scale`` against the reference ``y`` clamped to the
    fp8 range: within half an fp8 ulp (and half a subnormal step) of it, plus the kernel's own
    f32 error of ``y`` (``delta`` relative, ``abs_delta`` absolute; scale broadcasts)."""
    s = scale.double()
    m = FP8_MAX[fp8]
    ref = (y.double() / s).clamp(-m, m) * s
    err = (q.double() * s - ref).abs()
    bound = ref.abs() * (FP8_HALF_ULP[fp8] + 2 * delta) + s * FP8_SUBNORMAL[fp8] / 2
    return err, bound + 2 * abs_delta


def fp8_close(q: Any, scale: Any, y: Any, fp8: str, delta: float, abs_delta: float = 0.0) -> str:
    """``""`` when ``q * scale`` is within ``fp8_dequantized_error``'s bound of ``y`` (NaN only
    where y is NaN), else the count and the worst excess."""
    err, bound = fp8_dequantized_error(q, scale, y, fp8, delta, abs_delta)
    nan = y.double().isnan()
    ok = ((err <= bound * (1 + 1e-9)) & ~nan) | (nan & q.double().isnan())
    if ok.all():
        return ""
    worst = float((err - bound)[~ok].nan_to_num(math.inf).max())
    return f"{int((~ok).sum())} of {q.numel()} fp8 values beyond half an ulp (worst by {worst:.3g})"


# --- rope -------------------------------------------------------------------------------------


def rope_cache(max_pos: int, rot_dim: int, base: float = 10000.0, device: Any = "cuda") -> Any:
    """vLLM's RotaryEmbedding cache: [max_pos, rot_dim], cos then sin (f32 from fp64 angles)."""
    import torch

    inv = 1.0 / base ** (torch.arange(0, rot_dim, 2, dtype=torch.float64, device=device) / rot_dim)
    ang = torch.arange(max_pos, dtype=torch.float64, device=device)[:, None] * inv[None, :]
    return torch.cat([ang.cos(), ang.sin()], dim=-1).float()


def rope_cos_sin(positions: Any, cache: Any, neox: bool, dtype: Any = "float32") -> tuple[Any, Any]:
    """The cos and sin rows at ``positions`` spread over rot_dim as the layout pairs elements
    (NeoX: halves; GPT-J: interleaved pairs), [tokens, 1, rot_dim] in ``dtype``."""
    import torch

    cos, sin = cache[positions.long()].chunk(2, dim=-1)  # [tokens, rot / 2]
    if neox:
        cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    else:
        cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
    dt = _dt(dtype, cache)
    return cos[:, None].to(dt), sin[:, None].to(dt)


def rope_rotate(x: Any, cos: Any, sin: Any, neox: bool) -> Any:
    """x [tokens, heads, head_dim] rotated on its first rot_dim elements, in cos's dtype:
    transformers' ``rotate_half`` (NeoX) or vLLM's ``rotate_gptj`` (interleaved)."""
    import torch

    rot = cos.shape[-1]
    xf = x.to(cos.dtype)
    xr, rest = xf[..., :rot], xf[..., rot:]
    if neox:
        x1, x2 = xr.chunk(2, dim=-1)
        turned = torch.cat((-x2, x1), dim=-1)
    else:
        turned = torch.stack((-xr[..., 1::2], xr[..., ::2]), dim=-1).flatten(-2)
    return torch.cat((xr * cos + turned * sin, rest), dim=-1)


def rope(x: Any, positions: Any, cache: Any, neox: bool, dtype: Any = "float32") -> Any:
    """``rope_rotate`` of x by the cache rows at ``positions``, in ``dtype`` (None: x's)."""
    return rope_rotate(x, *rope_cos_sin(positions, cache, neox, _dt(dtype, x)), neox)


# --- attention --------------------------------------------------------------------------------


def attention(
    q: Any, k: Any, v: Any, causal: bool = False, scale: float | None = None,
    window: tuple[int, int] | None = None, softcap: float | None = None,
) -> tuple[Any, Any]:  # fmt: skip
    """fp32 softmax(q k^T * scale + mask) v per head: ([B, Sq, H, D], lse [B, H, Sq]).

    q [B, Sq, H, D], k and v [B, Sk, Hkv, D] (grouped-query heads repeated). The mask is built
    explicitly from the documented rule (bottom-right aligned causal and window); rows without
    any visible key give 0 and an LSE of -inf."""
    import torch

    sq, h, d = q.shape[1:]
    sk, hkv = k.shape[1], k.shape[2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    qf = q.float().transpose(1, 2)
    kf = k.float().repeat_interleave(h // hkv, dim=2).transpose(1, 2)
    vf = v.float().repeat_interleave(h // hkv, dim=2).transpose(1, 2)
    s = qf @ kf.transpose(-1, -2) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq, device=q.device)[:, None] + (sk - sq)
    j = torch.arange(sk, device=q.device)[None, :]
    keep = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    left, right = window if window is not None else (-1, -1)
    if causal:
        right = 0 if right < 0 else min(right, 0)
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(lse.isinf(), torch.zeros_like(lse), lse)[..., None])
    return (p @ vf).transpose(1, 2), lse
