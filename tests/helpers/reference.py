"""fp32 references (torch on the device) and per-dtype tolerances, shared by tests and benches."""

from __future__ import annotations

from typing import Any

# (rtol, atol) for outputs that are an f32 computation rounded once to the storage dtype.
TOLERANCES = {
    # expf/erff/tanhf may differ from torch's by an ulp or two of f32; near zero, GELU's
    # 1 + tanh(z) / 1 + erf(z) cancel, so the error there is absolute, ~ulp(1) * |x|.
    "float32": (1e-5, 1e-6),
    # one rounding to f16: half an ulp is 2**-11 ~ 4.9e-4 relative; tiny values need atol.
    "float16": (1e-3, 1e-6),
    # one rounding to bf16: half an ulp is 2**-9 ~ 2e-3; an f32 ulp of difference can flip a
    # tie, so allow one full bf16 ulp.
    "bfloat16": (8e-3, 1e-6),
}


def tol(dtype: Any, table: dict[str, tuple[float, float]] = TOLERANCES) -> dict[str, float]:
    """``assert_close`` keyword arguments for ``dtype`` from a tolerance ``table``."""
    rtol, atol = table[str(dtype).removeprefix("torch.")]
    return {"rtol": rtol, "atol": atol}


def activation_ref(op: str, x: Any) -> Any:
    import torch
    import torch.nn.functional as F

    xf = x.float()
    fns = {
        "relu": torch.relu,
        "gelu": F.gelu,
        "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
        "silu": F.silu,
        "sigmoid": torch.sigmoid,
    }
    return fns[op](xf)


def gated_ref(op: str, x: Any) -> Any:
    d = x.shape[-1] // 2
    act = {"silu_and_mul": "silu", "gelu_and_mul": "gelu", "gelu_tanh_and_mul": "gelu_tanh"}[op]
    return activation_ref(act, x[..., :d]) * x[..., d:].float()
