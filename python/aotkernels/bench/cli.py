"""``aotkernels bench``: our kernels beside their anchors, measured in the same run.

Method: CUDA events, warm-up, median of many repeats, random data, inputs rotated when they fit
in L2. Bytes count each input read once and each output written once. Before it is timed, each
case's result is checked against the reference formula (``check``: ok or FAIL with what
differs; the command then exits 1) or, for the matmuls, against the anchor (``rel_err``).
Prints a table, writes JSON with ``--json PATH`` and a PNG chart with ``--chart PATH`` (norm;
gemm, beside it as ``PATH-gemm.png`` under ``all``). Needs torch (the anchors are torch's).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import textwrap
from typing import Any

from . import attention, elementwise, gemm, norm, quant, report
from .common import FLOAT_DTYPES, failed_checks
from .timing import cuda_torch

# suite -> its module; "all" runs them in this order (compiled and backward only when named:
# minutes of compiling).
MODULES = {
    "launch": "launch", "jax": "jax", "elementwise": "elementwise", "norm": "norm",
    "quant": "quant", "gemm": "gemm", "rope": "rope", "batched": "batched",
    "attention": "attention", "compiled": "frontends", "backward": "frontends",
}  # fmt: skip
SUITES = (*MODULES, "all")
SUITE_DTYPES = {"elementwise": tuple(FLOAT_DTYPES), "norm": tuple(FLOAT_DTYPES),
                "quant": tuple(FLOAT_DTYPES), "gemm": gemm.DTYPES, "attention": attention.DTYPES,
                "compiled": ("bf16",), "backward": ("bf16",), "rope": tuple(FLOAT_DTYPES),
                "batched": ()}  # fmt: skip


def suite_help(name: str) -> str:
    """What suite ``name`` measures, on one line: the paragraph of its module's docstring that
    starts with its title (the suite's name or its command, then a colon)."""
    doc = importlib.import_module(f"{__package__}.{MODULES[name]}").__doc__ or ""
    for para in (" ".join(p.split()) for p in doc.split("\n\n")):
        if para.startswith((f"``bench {name}``:", f"{name}:")):
            return para.split(":", 1)[1].strip()
    raise LookupError(f"no paragraph for {name} in the docstring of {MODULES[name]}")


def _suites_epilog() -> str:
    return "suites:\n" + "\n".join(
        textwrap.fill(suite_help(n), 100, initial_indent=f"  {n:12} ", subsequent_indent=" " * 15)
        for n in MODULES
    )


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="aotkernels bench", description=__doc__, epilog=_suites_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    ap.add_argument("what", choices=SUITES)
    ap.add_argument("--chart", help="write a PNG chart (norm, gemm) to this file")
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--calls", type=int, default=20000, help="calls per host-cost round")
    ap.add_argument("--ops", help="comma-separated ops (elementwise, norm, quant)")
    ap.add_argument(
        "--dtypes",
        help="comma-separated: bf16,f16,f32 (elementwise, norm; default bf16,f32; quant, rope: "
        "default bf16), bf16,f16,fp8,int8 (gemm; default all four)",
    )
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile anchor")
    ap.add_argument(
        "--shapes", default="square,llm", help="gemm shape sets: square, llm (default both)"
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="gemm: squares 4096, 8192 and M {16, 1024} x (N, K) {(4096, 4096), (14336, 4096)}; "
        "quant: 16384 x 4096 only; attention: N {1024, 4096, 16384}",
    )
    ap.add_argument(
        "--only",
        help="attention: comma-separated tables to run: forward, decode, varlen (default all)",
    )
    ap.add_argument("--reps", type=int, default=50, help="gemm: timed calls per round (2 rounds)")
    ap.add_argument(
        "--fast-accum",
        action="store_true",
        help="gemm: fp8 with use_fast_accum=True on both sides (default: False on both)",
    )
    return ap


def known_ops() -> set[str]:
    """The op names --ops may give: those of the elementwise, norm and quant cases (first word)."""
    import torch  # the case tables hold torch's functions; no GPU needed to list them

    tables = (elementwise.cases(torch), norm.cases(torch), quant.cases(torch))
    return {name.split()[0] for table in tables for name in table}


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The arguments, with --dtypes, --shapes and --ops checked before torch is imported."""
    ap = parser()
    args = ap.parse_args(argv)
    if args.dtypes is not None and args.what not in ("launch", "jax"):
        runs = SUITE_DTYPES if args.what == "all" else {args.what: SUITE_DTYPES[args.what]}
        known = {d for ds in runs.values() for d in ds}
        unknown = sorted(set(args.dtypes.split(",")) - known)
        if unknown:
            ap.error(f"--dtypes: {unknown} not run by {args.what} (known: {sorted(known)})")
    if args.only is not None:
        unknown = sorted(set(args.only.split(",")) - set(attention.TABLES))
        if unknown:
            ap.error(f"--only: unknown {unknown} (known: {', '.join(attention.TABLES)})")
    bad = sorted(set(args.shapes.split(",")) - {"square", "llm"})
    if bad:
        ap.error(f"--shapes: unknown {bad} (known: square, llm)")
    if args.ops:  # each suite runs the ops it knows; a name no suite knows is a typo
        known = known_ops()
        unknown = sorted(set(args.ops.split(",")) - known)
        if unknown:
            ap.error(f"--ops: unknown {unknown} (known: {sorted(known)})")
    return args


def _run(name: str, args: argparse.Namespace, results: dict[str, Any]) -> None:
    """Run one suite, print its tables and keep its rows under its JSON keys."""
    module = importlib.import_module(f"{__package__}.{MODULES[name]}")
    if name == "attention":
        fwd, dec, var = module.run(args)
        results.update(attention=fwd, attention_decode=dec, attention_varlen=var)
        for rows, title in zip((fwd, dec, var), module.TITLES, strict=True):
            report.table(rows, title)
        return
    if name in ("compiled", "backward"):
        results[name] = getattr(module, f"run_{name}")(args)
        report.table(results[name], module.TITLES[name])
        return
    if name == "gemm":
        results["gemm_method"] = module.method(args)
    results[name] = module.run(args)
    report.table(results[name], module.TITLE)
    if args.chart and name == "norm":
        report.speedup_chart(results[name], args.chart, f"norm and softmax on {results['device']}")
    if args.chart and name == "gemm":
        path = report.gemm_chart_path(args.chart, args.what)
        report.gemm_chart(results[name], path, f"GEMM on {results['device']}")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    torch = cuda_torch()
    results: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    every = [s for s in MODULES if s not in ("compiled", "backward")]
    for name in every if args.what == "all" else [args.what]:
        _run(name, args, results)
    if args.json:
        report.write_json(results, args.json)
    failed = failed_checks(results)
    for line in failed:
        print(f"aotkernels bench: check failed: {line}", file=sys.stderr)
    return 1 if failed else 0
