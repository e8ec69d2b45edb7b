"""``bench gemm``: ak.matmul (bf16, f16; b K-major as nn.Linear's W.t() and b row-major) beside
torch.matmul (cuBLAS), ak.scaled_mm fp8 e4m3 (per-tensor, per-row/col and DeepSeek block scales)
beside torch._scaled_mm (both with the same ``use_fast_accum``: False, two-level accumulation,
unless ``--fast-accum``), int8 beside torch._int_mm; square {1024..8192}^3 and LLM layers
M {16, 128, 1024, 8192} x (N, K) {(4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192)};
TFLOP/s (2*M*N*K), ratio, goal.

Rows are timed back to back (a GPU sleep hides Python's launch cost; ``launch`` measures that)
in two alternating rounds of ours and the anchor, after one call of each compared for accuracy
(``rel_err``: the anchor's result is the reference).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .common import FLOAT_DTYPES, Row, dtypes, versus
from .timing import cuda_torch, input_sets, rotate

TITLE = "GEMM TFLOP/s (int8: TOP/s), ours / anchor ratio and goal"
DTYPES = ("bf16", "f16", "fp8", "int8")
SQUARE = (1024, 2048, 4096, 8192)
LLM_M = (16, 128, 1024, 8192)
LLM_NK = ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192))  # Llama-class layers
QUICK_SQUARE = (4096, 8192)
QUICK_LLM_M = (16, 1024)
QUICK_LLM_NK = ((4096, 4096), (14336, 4096))
INT8_MIN_M = 32  # torch._int_mm needs M > 16: the M = 16 rows run at M = 32 for int8
MAX_SETS = 64


class GemmShape(NamedTuple):
    """One problem, ``a`` [M, K] @ ``b`` [K, N]; ``kind`` is "square" or "llm"."""

    kind: str
    m: int
    n: int
    k: int

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


class GemmCase(NamedTuple):
    """Ours and the anchor on the same input sets; both map a call index to one call."""

    b_layout: str  # "kmajor": b = W.t() for W [N, K] row-major (nn.Linear); "rowmajor": [K, N]
    scales: str | None  # fp8: "tensor", "rowcol" or "block" (DeepSeek 1x128 / 128x128)
    ours: Callable[[int], Any]
    anchor: Callable[[int], Any]
    anchor_name: str


def shapes(kinds: Sequence[str], quick: bool) -> list[GemmShape]:
    """Square N^3 problems and LLM layers (every M for each weight [N, K]), fewer with quick."""
    square = QUICK_SQUARE if quick else SQUARE
    ms, nks = (QUICK_LLM_M, QUICK_LLM_NK) if quick else (LLM_M, LLM_NK)
    shapes: list[GemmShape] = []
    if "square" in kinds:
        shapes += [GemmShape("square", s, s, s) for s in square]
    if "llm" in kinds:
        shapes += [GemmShape("llm", m, n, k) for n, k in nks for m in ms]
    return shapes


def goal(dtype: str, shape: GemmShape) -> float:
    """The ratio over the anchor we aim for (the project's performance goals).

    int8 and fp8: the anchor (``torch._int_mm`` with K-major b, ``torch._scaled_mm``) on every
    shape; bf16/f16: cuBLAS on large squares (>= 4096), 0.95x on LLM shapes, 0.9x on the small
    squares (1024, 2048), which are not "large".
    """
    if dtype in ("int8", "fp8") or (shape.kind == "square" and shape.m >= 4096):
        return 1.0
    return 0.95 if shape.kind == "llm" else 0.9


def fp8_scale_modes(shape: GemmShape, squares_selected: bool) -> tuple[str, ...]:
    """Per-tensor scales on every shape; per-row/col and block scales once per large size.

    Those run on the squares >= 4096, or on the M = 1024 LLM shapes when no square is selected.
    """
    if (shape.kind == "square" and shape.m >= 4096) or (not squares_selected and shape.m == 1024):
        return ("tensor", "rowcol", "block")
    return ("tensor",)


def _sets(shape: GemmShape, itemsize: int) -> int:
    """Input sets to rotate through so that together they overflow the L2 (1 when one does)."""
    return input_sets((shape.m + shape.n) * shape.k * itemsize, MAX_SETS)


def _float_cases(torch: Any, ak: Any, dtype: str, shape: GemmShape) -> list[GemmCase]:
    """bf16 / f16: ``ak.matmul`` vs ``torch.matmul``, b K-major (``W.t()``) and row-major."""
    tdt = getattr(torch, FLOAT_DTYPES[dtype])
    m, n, k = shape.m, shape.n, shape.k
    sets = _sets(shape, 2)
    a = [torch.randn(m, k, device="cuda", dtype=tdt) for _ in range(sets)]
    w = [torch.randn(n, k, device="cuda", dtype=tdt) for _ in range(sets)]  # weight [N, K]
    b_k = [x.t() for x in w]
    b_row = [x.t().contiguous() for x in w]  # same values, [K, N] row-major
    return [
        GemmCase("kmajor", None, rotate(ak.matmul, a, b_k), rotate(torch.matmul, a, b_k),
                 "torch.matmul"),
        GemmCase("rowmajor", None, rotate(ak.matmul, a, b_row),
                 rotate(torch.matmul, a, b_row), "torch.matmul"),
    ]  # fmt: skip


def _fp8_scales(torch: Any, mode: str, shape: GemmShape) -> tuple[Any, Any, Any, Any]:
    """(ours scale_a, ours scale_b, torch scale_a, torch scale_b): the same values.

    block: a 1x128 (M, K/128) and b 128x128 (N/128, K/128) for us; torch._scaled_mm reads
    scale_a (M, K/128) with strides (1, M) ("outer-dim-major") and scale_b (K/128, N/128) with
    strides (1, K/128), i.e. our (N/128, K/128) row-major array transposed.
    """
    m, n, k = shape.m, shape.n, shape.k

    def rand(*size: int) -> Any:
        return torch.rand(*size, device="cuda", dtype=torch.float32) + 0.5  # never zero

    if mode == "tensor":
        sa, sb = rand(1), rand(1)
        return sa, sb, sa, sb
    if mode == "rowcol":
        sa, sb = rand(m, 1), rand(1, n)
        return sa, sb, sa, sb
    kb, nb = math.ceil(k / 128), math.ceil(n / 128)
    sa, sb = rand(kb, m).t(), rand(nb, kb)
    return sa, sb, sa, sb.t()


def _fp8_cases(
    torch: Any, ak: Any, shape: GemmShape, modes: Sequence[str], fast_accum: bool
) -> list[GemmCase]:
    """fp8 e4m3, a row-major, b column-major, out bf16: ``ak.scaled_mm`` vs ``_scaled_mm``, both
    with ``use_fast_accum=fast_accum`` (block scales: no effect on ours)."""
    f8, out = torch.float8_e4m3fn, torch.bfloat16
    m, n, k = shape.m, shape.n, shape.k
    sets = _sets(shape, 1)
    a = [torch.randn(m, k, device="cuda").to(f8) for _ in range(sets)]
    b = [torch.randn(n, k, device="cuda").to(f8).t() for _ in range(sets)]

    def ours(x: Any, y: Any, sa: Any, sb: Any) -> Any:
        return ak.scaled_mm(x, y, sa, sb, out_dtype=out, use_fast_accum=fast_accum)

    def anchor(x: Any, y: Any, sa: Any, sb: Any) -> Any:
        return torch._scaled_mm(
            x, y, scale_a=sa, scale_b=sb, out_dtype=out, use_fast_accum=fast_accum
        )

    cases = []
    for mode in modes:
        sa, sb, ta, tb = _fp8_scales(torch, mode, shape)
        cases.append(
            GemmCase("kmajor", mode, rotate(ours, a, b, [sa], [sb]),
                     rotate(anchor, a, b, [ta], [tb]), "torch._scaled_mm")
        )  # fmt: skip
    return cases


def _int8_cases(torch: Any, ak: Any, shape: GemmShape) -> list[GemmCase]:
    """int8, a row-major, b column-major, exact int32 out: ``ak.scaled_mm`` vs ``_int_mm``."""
    m, n, k = shape.m, shape.n, shape.k
    sets = _sets(shape, 1)

    def rand(*size: int) -> Any:
        return torch.randint(-128, 128, size, device="cuda", dtype=torch.int8)

    a = [rand(m, k) for _ in range(sets)]
    b = [rand(n, k).t() for _ in range(sets)]

    def ours(x: Any, y: Any) -> Any:
        return ak.scaled_mm(x, y, out_dtype=torch.int32)

    return [GemmCase("kmajor", None, rotate(ours, a, b), rotate(torch._int_mm, a, b),
                     "torch._int_mm")]  # fmt: skip


def _row(dtype: str, shape: GemmShape, case: GemmCase, reps: int, note: str) -> Row:
    """Check ours against the anchor once, then time both; one table / JSON row."""
    rel, t_ours, t_anchor, notes = versus(case.ours, case.anchor, reps)
    ratio = t_anchor / t_ours if t_ours and t_anchor else None
    target = goal(dtype, shape)
    return {
        "dtype": dtype, "shapes": shape.kind, "M": shape.m, "N": shape.n, "K": shape.k,
        "b": case.b_layout, "scales": case.scales,
        "ours_TFLOPS": shape.flops / t_ours / 1e9 if t_ours else None,
        "anchor_TFLOPS": shape.flops / t_anchor / 1e9 if t_anchor else None,
        "ratio": ratio, "goal": target, "meets": ratio >= target if ratio is not None else None,
        "rel_err": rel, "ours_ms": t_ours, "anchor_ms": t_anchor, "anchor": case.anchor_name,
        "note": "; ".join([note, *notes] if note else notes),
    }  # fmt: skip


def _cases(
    torch: Any, ak: Any, args: argparse.Namespace, dtype: str, shape: GemmShape, squares: bool
) -> list[GemmCase]:
    """The cases of one dtype and shape (inputs allocated here, freed with the cases)."""
    if dtype == "int8":
        return _int8_cases(torch, ak, shape)
    if dtype == "fp8":
        return _fp8_cases(torch, ak, shape, fp8_scale_modes(shape, squares), args.fast_accum)
    return _float_cases(torch, ak, dtype, shape)


def run(args: argparse.Namespace) -> list[Row]:
    torch = cuda_torch()
    import aotkernels as ak

    kinds = args.shapes.split(",")
    rows: list[Row] = []
    for dtype in dtypes(args, DTYPES, DTYPES):
        for shape in shapes(kinds, args.quick):
            note = ""
            if dtype == "int8" and shape.m < INT8_MIN_M:
                shape = shape._replace(m=INT8_MIN_M)
                note = f"M={INT8_MIN_M} for int8: torch._int_mm needs M > 16"
            if dtype == "fp8":
                note = "use_fast_accum=True" if args.fast_accum else "use_fast_accum=False"
            cases = _cases(torch, ak, args, dtype, shape, "square" in kinds)
            rows += [_row(dtype, shape, c, args.reps, note) for c in cases]
            cases.clear()
            torch.cuda.empty_cache()
    return rows


def method(args: argparse.Namespace) -> dict[str, Any]:
    """How the rows were measured (``gemm_method`` in the JSON)."""
    return {
        "reps_per_round": args.reps, "rounds": 2, "fp8_use_fast_accum": args.fast_accum,
        "flops": "2*M*N*K", "int8_M": f"{INT8_MIN_M} where the shape set says 16",
    }  # fmt: skip
