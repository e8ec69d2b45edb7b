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
