"""The tests' references: the formulas and tolerance tables of ``aotkernels.bench.reference``
(where they live once, so that ``aotkernels bench`` checks its results against the same ones
from an installed wheel) and the tests' ``assert_close`` keyword arguments from a table."""

from __future__ import annotations

from typing import Any

from aotkernels.bench.reference import (
    FP8_DELTA,
    FP8_HALF_ULP,
    FP8_MAX,
    FP8_SUBNORMAL,
    MIN_AMAX,
    activation,
    attention,
    fp8_dequantized_error,
    fp8_dynamic_scale,
    fused_add_rms_norm,
    gated,
    layer_norm,
    rms_norm,
    rope,
    rope_cache,
    softmax,
)
from aotkernels.bench.reference import TOLERANCES as FAMILY_TOLERANCES

__all__ = [
    "FAMILY_TOLERANCES", "FP8_DELTA", "FP8_HALF_ULP", "FP8_MAX", "FP8_SUBNORMAL", "MIN_AMAX",
    "TOLERANCES", "activation", "attention", "fp8_dequantized_error",
    "fp8_dynamic_scale", "fused_add_rms_norm", "gated", "layer_norm", "rms_norm",
    "rope", "rope_cache", "softmax", "tol",
]  # fmt: skip

# (rtol, atol) for outputs that are an f32 computation rounded once to the storage dtype.
TOLERANCES = FAMILY_TOLERANCES["elementwise"]


def tol(dtype: Any, table: dict[str, tuple[float, float]] = TOLERANCES) -> dict[str, float]:
    """``assert_close`` keyword arguments for ``dtype`` from a tolerance ``table``."""
    rtol, atol = table[str(dtype).removeprefix("torch.")]
    return {"rtol": rtol, "atol": atol}


# --- GEMM ---------------------------------------------------------------------------------------
# fp64 references on the device (exact for small-integer operands, so a result rounded once to the
# output dtype can be compared bit for bit) and the error bound for random operands.


def exact_product(a: Any, b: Any) -> Any:
    """a @ b in float64 on the device: exact for small-integer operands (every product and
    partial sum is an integer far below 2**53)."""
    return a.float().double() @ b.float().double()


def rounded_once(ref: Any, dtype: Any) -> Any:
    """An exact fp64 result rounded once to ``dtype`` (through f32, where it is exact)."""
    import torch

    return ref.to(torch.int32) if dtype == torch.int32 else ref.float().to(dtype)


def scaled_mm_ref(av: Any, bv: Any, sa: Any, sb: Any, bias: Any = None) -> Any:
    """fp64 (a @ b) * scales (+ bias), with scaled_mm's scale shapes: none, per tensor, per row
    of a / column of b, or 1x128 (a) and 128x128 (b) blocks applied per 128-wide K block."""
    import torch

    m, k = av.shape
    n = bv.shape[1]
    kb, nb = -(-k // 128), -(-n // 128)
    block = sa is not None and sa.dim() == 2 and sa.shape[1] == kb
    if block and tuple(sb.shape) == (nb, kb) and nb * kb > 1:  # else: plain scales mean the same
        ref = torch.zeros(m, n, device="cuda", dtype=torch.float64)
        for j in range(kb):
            ks = slice(j * 128, min(k, j * 128 + 128))
            col = sb[:, j].double().repeat_interleave(128)[:n]
            ref += exact_product(av[:, ks], bv[ks]) * sa[:, j : j + 1].double() * col
    else:
        ref = exact_product(av, bv)
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
GEMM_ACC_BOUND = {
    "float16": 2**-12,
    "bfloat16": 2**-12,
    "float8_e4m3fn": 2**-9,
    "float8_e5m2": 2**-9,
    "int8": 0.0,
}
GEMM_OUT_ULP = {"float32": 2**-23, "float16": 2**-10, "bfloat16": 2**-7}


def gemm_bound(ref: Any, absref: Any, out_dtype: Any, in_dtype: str) -> Any:
    """The error allowed elementwise against the exact ``ref``: one ulp of ``out_dtype``
    relative to |ref|, plus ``in_dtype``'s accumulation bound relative to ``absref`` (|a| @ |b|,
    scaled as the result is)."""
    out = str(out_dtype).removeprefix("torch.")
    return GEMM_OUT_ULP[out] * ref.abs() + GEMM_ACC_BOUND[in_dtype] * absref


def f32_sum_bound(ref: Any, av: Any, bv: Any) -> Any:
    """The error allowed elementwise for an f32 result of av @ bv against the fp64 ``ref``, whatever
    order its K products were summed in (split or not): one f32 ulp of |ref| plus K * 2**-24 of
    |av| @ |bv|."""
    k = av.shape[1]
    return 2**-23 * ref.abs() + k * 2**-24 * (av.double().abs() @ bv.double().abs())


def assert_gemm_near(y: Any, ref: Any, absref: Any, in_dtype: str) -> None:
    """|y - ref| within ``gemm_bound``, and a non-zero result."""
    err = (y.double() - ref).abs()
    bound = gemm_bound(ref, absref, y.dtype, in_dtype)
    worst = (err - bound).max().item()
    assert worst <= 0, f"error exceeds the bound by {worst:g} (max err {err.max().item():g})"
    assert y.double().norm() > 0 and ref.norm() > 0


def exact_product_np(a: Any, b: Any) -> Any:
    """``exact_product`` for host (NumPy) arrays."""
    return a.astype("float64") @ b.astype("float64")
