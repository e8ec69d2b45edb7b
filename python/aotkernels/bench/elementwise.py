"""``bench elementwise``: the bandwidth of each activation / gated op beside torch eager,
torch.compile and the device copy, at small, medium and large sizes."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from . import reference
from .common import (
    FLOAT_DTYPES,
    MEMORY_BOUND_DEFAULT,
    Row,
    bandwidth,
    check,
    compiled,
    copy_tbps,
    dtypes,
    selected,
)
from .timing import cuda_torch, input_sets, rotating

TITLE = "elementwise bandwidth (TB/s) and ratios"
SIZES = {"small": (64, 1024), "medium": (4096, 4096), "large": (16384, 8192)}


class Case(NamedTuple):
    ours: Callable[[Any], Any]
    eager: Callable[[Any], Any]  # torch's op, or the formula in the storage dtype
    gated: bool  # halves the last dim


def cases(torch: Any) -> dict[str, Case]:
    import aotkernels as ak

    def act(op: str) -> Callable[[Any], Any]:
        return partial(reference.activation, op, dtype=None)

    return {
        "relu": Case(ak.relu, torch.relu, False),
        "gelu": Case(ak.gelu, act("gelu"), False),
        "gelu_tanh": Case(partial(ak.gelu, approximate="tanh"), act("gelu_tanh"), False),
        "silu": Case(ak.silu, act("silu"), False),
        "sigmoid": Case(ak.sigmoid, torch.sigmoid, False),
        "silu_and_mul": Case(ak.silu_and_mul, partial(reference.gated, "silu_and_mul", dtype=None),
                             True),
        "gelu_and_mul": Case(ak.gelu_and_mul, partial(reference.gated, "gelu_and_mul", dtype=None),
                             True),
    }  # fmt: skip


def compare(ours: Callable[[Any], Any], op: str, x: Any) -> str:
    """Our ``op`` on ``x`` against the fp32 reference (``reference.close``)."""
    want = reference.gated(op, x) if op in reference.GATED else reference.activation(op, x)
    return reference.close(ours(x), want, "elementwise")


def run(args: argparse.Namespace) -> list[Row]:
    torch = cuda_torch()
    table = cases(torch)
    rows: list[Row] = []
    for dtype_name in dtypes(args, list(FLOAT_DTYPES), MEMORY_BOUND_DEFAULT):
        dtype = getattr(torch, FLOAT_DTYPES[dtype_name])
        for size_name, shape in SIZES.items():
            nbytes = shape[0] * shape[1] * torch.finfo(dtype).bits // 8
            xs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(input_sets(nbytes))]
            copy = copy_tbps(torch, xs)
            for op in selected(args, list(table)):
                case = table[op]
                ok = check(compare, case.ours, op, xs[0])
                moved = nbytes + (nbytes // 2 if case.gated else nbytes)
                comp = compiled(args, torch, case.eager)
                ms = {"ours": rotating(case.ours, xs), "eager": rotating(case.eager, xs),
                      "compile": rotating(comp, xs) if comp else None}  # fmt: skip
                rows.append({"op": op, "dtype": dtype_name, "size": size_name, "shape": list(shape),
                             "check": ok, **bandwidth(moved, copy, ms)})  # fmt: skip
            xs.clear()
            torch.cuda.empty_cache()
    return rows
