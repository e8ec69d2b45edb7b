"""``bench quant``: fp8 (e4m3) outputs of rms_norm / fused_add_rms_norm / layer_norm /
silu_and_mul with a static or per-token scale, and quantize_fp8 (static, per token, per tensor,
1x128 groups), beside the two-op torch sequence (torch's op, then scale, clamp and
``.to(float8)``) and torch.compile of it, on 16384 x {4096, 8192} and {1, 256} x 4096
(--quick: 16384 x 4096); TB/s and the fraction of copy bandwidth (a copy of x)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NamedTuple

from . import reference
from .common import FLOAT_DTYPES, Row, bandwidth, check, compiled, copy_tbps, dtypes, selected
from .timing import cuda_torch, input_sets, rotating

TITLE = "fp8-quantizing ops: bandwidth (TB/s) and ratios"
SHAPES = ((16384, 4096), (16384, 8192), (256, 4096), (1, 4096))
FP8 = "float8_e4m3fn"
EPS = 1e-6
LN_EPS = 1e-5

Fn = Callable[[Any, Any, Any, Any, Any], Any]  # (x, residual, weight, bias, static scale)


class Case(NamedTuple):
    ours: Fn
    seq: Fn  # the torch sequence: its op, then scale, clamp and convert
    want: Fn  # the fp64 value that gets quantized
    kind: str  # "norm", "silu_and_mul" or "quantize": the f32 error of the value (FP8_DELTA)
    reads: int  # x-sized arrays read
    out: float = 1.0  # fp8 bytes written per input element
    scales: str = ""  # dynamic scales written: "row" (one a row) or "group" (one per 128)

    def moved(self, rows: int, cols: int, itemsize: int) -> int:
        extra = {"row": 4 * rows, "group": 4 * rows * (cols // 128)}.get(self.scales, 0)
        return int(rows * cols * (self.reads * itemsize + self.out)) + extra


def cases(torch: Any) -> dict[str, Case]:
    import torch.nn.functional as F

    import aotkernels as ak

    e4m3, m = torch.float8_e4m3fn, reference.FP8_MAX[FP8]

    def static(y: Any, s: Any) -> Any:
        return (y.float() / s).clamp(-m, m).to(e4m3)

    def dynamic(y: Any, dims: Any = -1) -> tuple[Any, Any]:
        yf = y.float()
        s = reference.fp8_dynamic_scale(yf, FP8, dims)
        return (yf / s).clamp(-m, m).to(e4m3), s

    def group(y: Any, g: int = 128) -> tuple[Any, Any]:
        r, k = y.shape
        q, s = dynamic(y.view(r, k // g, g))
        return q.view(r, k), s.view(r, k // g)

    def rms(x: Any, w: Any) -> Any:
        return F.rms_norm(x, (x.shape[-1],), w, EPS)

    def fused(x: Any, r: Any, w: Any, s: Any) -> Any:
        r.add_(x)
        return static(rms(r, w), s), r

    def silu_mul(x: Any) -> Any:
        return reference.gated("silu_and_mul", x, dtype=None)

    def rms_want(x: Any, r: Any, w: Any, b: Any, s: Any) -> Any:
        return reference.rms_norm(x, w, EPS)

    def silu_want(x: Any, r: Any, w: Any, b: Any, s: Any) -> Any:
        return reference.gated("silu_and_mul", x, dtype="float64")

    def x_want(x: Any, r: Any, w: Any, b: Any, s: Any) -> Any:
        return x.double()

    return {
        "rms_norm static": Case(
            lambda x, r, w, b, s: ak.rms_norm(x, w, EPS, out_dtype=FP8, scale=s),
            lambda x, r, w, b, s: static(rms(x, w), s), rms_want, "norm", 1),
        "rms_norm per-token": Case(
            lambda x, r, w, b, s: ak.rms_norm(x, w, EPS, out_dtype=FP8),
            lambda x, r, w, b, s: dynamic(rms(x, w)), rms_want, "norm", 1, scales="row"),
        "fused_add_rms_norm static": Case(
            lambda x, r, w, b, s: ak.fused_add_rms_norm(x, r, w, EPS, out_dtype=FP8, scale=s),
            lambda x, r, w, b, s: fused(x, r, w, s),
            lambda x, r, w, b, s: reference.fused_add_rms_norm(x, r, w, EPS)[0], "norm", 3),
        "layer_norm static": Case(
            lambda x, r, w, b, s: ak.layer_norm(x, w, b, LN_EPS, out_dtype=FP8, scale=s),
            lambda x, r, w, b, s: static(F.layer_norm(x, (x.shape[-1],), w, b, LN_EPS), s),
            lambda x, r, w, b, s: reference.layer_norm(x, w, b, LN_EPS), "norm", 1),
        "silu_and_mul static": Case(
            lambda x, r, w, b, s: ak.silu_and_mul(x, out_dtype=FP8, scale=s),
            lambda x, r, w, b, s: static(silu_mul(x), s), silu_want, "silu_and_mul", 1, 0.5),
        "silu_and_mul per-token": Case(
            lambda x, r, w, b, s: ak.silu_and_mul(x, out_dtype=FP8),
            lambda x, r, w, b, s: dynamic(silu_mul(x)), silu_want, "silu_and_mul", 1, 0.5, "row"),
        "quantize static": Case(
            lambda x, r, w, b, s: ak.quantize_fp8(x, s),
            lambda x, r, w, b, s: static(x, s), x_want, "quantize", 1),
        "quantize per-token": Case(
            lambda x, r, w, b, s: ak.quantize_fp8(x, per_token=True),
            lambda x, r, w, b, s: dynamic(x), x_want, "quantize", 1, scales="row"),
        "quantize per-tensor": Case(
            lambda x, r, w, b, s: ak.quantize_fp8(x),
            lambda x, r, w, b, s: dynamic(x, None), x_want, "quantize", 1),
        "quantize group128": Case(
            lambda x, r, w, b, s: ak.quantize_fp8(x, group_size=128),
            lambda x, r, w, b, s: group(x), x_want, "quantize", 1, scales="group"),
    }  # fmt: skip


def compare(case: Case, x: Any, r: Any, w: Any, b: Any, s: Any) -> str:
    """Our fp8 result, dequantized with the scale it used, against the fp64 reference within
    half an fp8 ulp and the f32 error of the value (``reference.fp8_close``); on copies, as
    fused_add_rms_norm writes its residual."""
    y = case.want(x, r, w, b, s)
    res = case.ours(x.clone(), r.clone(), w, b, s)
    q, scale = res[0], res[-1]
    if scale.dim() and scale.shape[-1] not in (1, y.shape[-1]):  # one a group of 128 in a row
        scale = scale.repeat_interleave(y.shape[-1] // scale.shape[-1], -1)
    # Layer norm's bias may cancel a normalized value, leaving a small y with the few-ulp error
    # of its O(max |y|) terms.
    abs_delta = 1e-6 * float(y.abs().max()) if case.kind == "norm" else 0.0
    return reference.fp8_close(q, scale, y, FP8, reference.FP8_DELTA[case.kind], abs_delta)


def run(args: argparse.Namespace) -> list[Row]:
    torch = cuda_torch()
    table = cases(torch)
    rows: list[Row] = []
    for dtype_name in dtypes(args, list(FLOAT_DTYPES), ("bf16",)):
        dtype = getattr(torch, FLOAT_DTYPES[dtype_name])
        size = torch.finfo(dtype).bits // 8
        for shape in SHAPES[:1] if args.quick else SHAPES:
            nbytes = shape[0] * shape[1] * size
            sets = input_sets(3 * nbytes)
            xs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(sets)]
            rs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(sets)]
            w = torch.rand(shape[1], device="cuda", dtype=dtype) + 0.5
            b = torch.randn(shape[1], device="cuda", dtype=dtype)
            scale = torch.full((1,), 6.0 / reference.FP8_MAX[FP8], device="cuda")
            copy = copy_tbps(torch, xs)
            inputs = (xs, rs, [w], [b], [scale])
            for op in selected(args, list(table)):
                case = table[op]
                ok = check(compare, case, xs[0], rs[0], w, b, scale)
                comp = compiled(args, torch, case.seq)
                ms = {"ours": rotating(case.ours, *inputs),
                      "torch_seq": rotating(case.seq, *inputs),
                      "compile": rotating(comp, *inputs) if comp else None}  # fmt: skip
                row = bandwidth(case.moved(shape[0], shape[1], size), copy, ms)
                rows.append({"op": op, "dtype": dtype_name, "shape": list(shape), "check": ok,
                             **row})  # fmt: skip
            xs.clear()
            rs.clear()
            torch.cuda.empty_cache()
    return rows
