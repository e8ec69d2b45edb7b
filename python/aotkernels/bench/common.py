"""What the suites share: dtype selection, the bandwidth rows of the memory-bound suites, and the
correctness check each suite runs before it times anything."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from .reference import rel_err
from .timing import median_ms, paired_ms, probe, rotating

FLOAT_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}
MEMORY_BOUND_DEFAULT = ("bf16", "f32")  # elementwise and norm without --dtypes

Row = dict[str, Any]


def dtypes(args: argparse.Namespace, known: Sequence[str], default: Sequence[str]) -> list[str]:
    """The dtypes one suite runs: its default without --dtypes, else the given ones it knows
    (``all`` hands every suite the same list)."""
    if args.dtypes is None:
        return list(default)
    return [d for d in args.dtypes.split(",") if d in known]


def selected(args: argparse.Namespace, names: Sequence[str]) -> list[str]:
    """The ops of ``names`` that --ops asks for (all without --ops); a name is its first word."""
    if not args.ops:
        return list(names)
    wanted = set(args.ops.split(","))
    return [n for n in names if n.split()[0] in wanted]


def compiled(args: argparse.Namespace, torch: Any, fn: Callable[..., Any]) -> Any:
    """``torch.compile(fn)`` for the compile anchor, or None under --no-compile."""
    return None if args.no_compile else torch.compile(fn, dynamic=False)


def copy_tbps(torch: Any, xs: list[Any]) -> float:
    """The device copy bandwidth on these inputs (TB/s): each byte read once and written once."""
    dst = torch.empty_like(xs[0])
    return float(2 * xs[0].numel() * xs[0].element_size() / rotating(dst.copy_, xs) / 1e9)


def bandwidth(moved: float, copy: float, ms: dict[str, float | None]) -> Row:
    """TB/s of ours (``ms["ours"]``) and of each anchor, the device copy's, each anchor's time
    over ours (``vs_<anchor>``) and our share of the copy bandwidth (``of_copy``)."""
    t_ours = ms["ours"]
    assert t_ours is not None
    row: Row = {f"{k}_TBps": moved / t / 1e9 if t else None for k, t in ms.items()}
    row["copy_TBps"] = copy
    row.update({f"vs_{k}": t / t_ours if t else None for k, t in ms.items() if k != "ours"})
    row["of_copy"] = row["ours_TBps"] / copy
    return row


def check(compare: Callable[..., str], *args: Any) -> str:
    """``compare(*args)`` (``""`` when our result matches the reference, else what differs) as
    the row's check: ``"ok"``, or ``"FAIL: <what differs>"``, also when the call raises (the
    suite then goes on measuring; the command exits non-zero)."""
    try:
        why = compare(*args)
    except Exception as e:
        why = f"{type(e).__name__}: {str(e).strip()[:200]}"
    return f"FAIL: {why}" if why else "ok"


def failed_checks(results: dict[str, Any]) -> list[str]:
    """``suite: row`` for every row of ``results`` whose check failed."""
    bad = []
    for suite, rows in results.items():
        if isinstance(rows, list):
            bad += [f"{suite}: {r}" for r in rows if str(r.get("check", "")).startswith("FAIL")]
    return bad


def versus(
    ours: Callable[[int], Any], anchor: Callable[[int], Any], reps: int
) -> tuple[float | None, float | None, float | None, list[str]]:
    """(rel_err of ours against the anchor's result, ours ms, anchor ms, notes): one call of
    each compared, then both timed in alternating rounds; a side that fails is noted, not
    timed."""
    mine, why = probe(ours)
    ref, why_anchor = probe(anchor)
    notes = [f"ours failed: {why}"] if why else []
    notes += [f"no anchor: {why_anchor}"] if why_anchor else []
    rel = rel_err(mine, ref) if mine is not None and ref is not None else None
    del mine, ref
    t_ours: float | None = None
    t_anchor: float | None = None
    if not why:
        t_ours, t_anchor = paired_ms(ours, None if why_anchor else anchor, reps)
    elif not why_anchor:
        t_anchor = median_ms(anchor, reps)
    return rel, t_ours, t_anchor, notes
