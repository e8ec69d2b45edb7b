"""``bench norm``: rms_norm, fused_add_rms_norm, layer_norm and softmax beside torch's own op
(F.rms_norm, F.layer_norm, torch.softmax), the eager formula and torch.compile of it, on
16384 x {1024, 4096, 8192} and decode-like {1, 32, 256} x {4096, 8192}."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NamedTuple

from . import common, reference
from .common import FLOAT_DTYPES, Row, check, compiled
from .timing import cuda_torch, input_sets, rotating

TITLE = "norm / softmax bandwidth (TB/s) and ratios"
SHAPES = ((16384, 1024), (16384, 4096), (16384, 8192), (1, 4096), (32, 4096), (256, 4096),
          (1, 8192), (32, 8192), (256, 8192))  # fmt: skip
EPS = 1e-6
LN_EPS = 1e-5

Fn = Callable[[Any, Any, Any, Any], Any]  # (x, residual, weight, bias) -> result


class Case(NamedTuple):
    ours: Fn
    native: Fn | None  # torch's own op, where it has one
    eager: Fn  # the formula as a model writes it (f32 statistics, storage-dtype output)
    want: Fn  # the fp64 reference
    passes: int  # x-sized arrays read and written
    family: str  # the tolerance table


def _softmax_eager(x: Any) -> Any:
    """The softmax a model writes: f32, max-subtracted, rounded once."""
    import torch

    xf = x.float()
    e = torch.exp(xf - xf.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


def cases(torch: Any) -> dict[str, Case]:
    import torch.nn.functional as F

    import aotkernels as ak

    def rms_eager(x: Any, w: Any) -> Any:  # HF's LlamaRMSNorm
        return reference.rms_norm(x, eps=EPS, dtype="float32").to(x.dtype) * w

    def fused_eager(x: Any, r: Any, w: Any) -> tuple[Any, Any]:
        r = x + r
        return rms_eager(r, w), r

    def ln_eager(x: Any, w: Any, b: Any) -> Any:
        return reference.layer_norm(x, eps=LN_EPS, dtype="float32").to(x.dtype) * w + b

    return {
        "rms_norm": Case(lambda x, r, w, b: ak.rms_norm(x, w, EPS),
                         lambda x, r, w, b: F.rms_norm(x, (x.shape[-1],), w, EPS),
                         lambda x, r, w, b: rms_eager(x, w),
                         lambda x, r, w, b: reference.rms_norm(x, w, EPS), 2, "norm"),
        "fused_add_rms_norm": Case(lambda x, r, w, b: ak.fused_add_rms_norm(x, r, w, EPS), None,
                                   lambda x, r, w, b: fused_eager(x, r, w),
                                   lambda x, r, w, b: reference.fused_add_rms_norm(x, r, w, EPS),
                                   4, "norm"),
        "layer_norm": Case(lambda x, r, w, b: ak.layer_norm(x, w, b, LN_EPS),
                           lambda x, r, w, b: F.layer_norm(x, (x.shape[-1],), w, b, LN_EPS),
                           lambda x, r, w, b: ln_eager(x, w, b),
                           lambda x, r, w, b: reference.layer_norm(x, w, b, LN_EPS), 2, "norm"),
        "softmax": Case(lambda x, r, w, b: ak.softmax(x), lambda x, r, w, b: torch.softmax(x, -1),
                        lambda x, r, w, b: _softmax_eager(x),
                        lambda x, r, w, b: reference.softmax(x), 2, "softmax"),
    }  # fmt: skip


def compare(case: Case, x: Any, r: Any, w: Any, b: Any) -> str:
    """Ours against the reference on copies of the inputs (fused_add_rms_norm writes both
    x and the residual: each is compared)."""
    want = case.want(x, r, w, b)
    got = case.ours(x.clone(), r.clone(), w, b)
    pairs = zip(got, want, strict=True) if isinstance(want, tuple) else [(got, want)]
    return "; ".join(why for g, e in pairs if (why := reference.close(g, e, case.family)))


def _timer(xs: list[Any], rs: list[Any], w: Any, b: Any) -> Callable[[Fn | None], float | None]:
    """Median ms of ``fn(x, residual, weight, bias)``, rotating through the input sets."""
    return lambda fn: rotating(fn, xs, rs, [w], [b]) if fn is not None else None


def run(args: argparse.Namespace) -> list[Row]:
    torch = cuda_torch()
    table = cases(torch)
    rows: list[Row] = []
    for dtype_name in common.dtypes(args, list(FLOAT_DTYPES), common.MEMORY_BOUND_DEFAULT):
        dtype = getattr(torch, FLOAT_DTYPES[dtype_name])
        size = torch.finfo(dtype).bits // 8
        for shape in SHAPES:
            nbytes = shape[0] * shape[1] * size
            sets = input_sets(4 * nbytes)
            xs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(sets)]
            rs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(sets)]
            w = torch.randn(shape[1], device="cuda", dtype=dtype)
            b = torch.randn(shape[1], device="cuda", dtype=dtype)
            copy = common.copy_tbps(torch, xs)
            time = _timer(xs, rs, w, b)
            for op in common.selected(args, list(table)):
                case = table[op]
                ok = check(compare, case, xs[0], rs[0], w, b)
                t_ours = rotating(case.ours, xs, rs, [w], [b])
                anchors = {"torch_op": time(case.native), "eager": time(case.eager),
                           "compile": time(compiled(args, torch, case.eager))}  # fmt: skip
                moved = case.passes * nbytes + 2 * shape[1] * size  # and the weight, bias
                rows.append({
                    "op": op, "dtype": dtype_name, "shape": list(shape), "check": ok,
                    **common.bandwidth(moved, copy, {"ours": t_ours, **anchors}),
                    "vs_best_torch": min(t for t in anchors.values() if t) / t_ours,
                })  # fmt: skip
            xs.clear()
            rs.clear()
            torch.cuda.empty_cache()
    return rows
