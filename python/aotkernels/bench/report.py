"""The benchmarks' output: tables on the terminal, PNG charts, the JSON file."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterable
from typing import Any

from .common import Row


def cell(v: Any) -> str:
    """A table cell: floats to 3 decimals, tiny ones (errors) in exponent form."""
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.3f}" if v == 0 or abs(v) >= 0.01 else f"{v:.2e}"
    return str(v)


def geomean(values: Iterable[float | None]) -> float | None:
    """The geometric mean of the ratios that were measured (None when none was)."""
    logs = [math.log(v) for v in values if v]
    return math.exp(sum(logs) / len(logs)) if logs else None


def table(rows: list[Row], title: str) -> None:
    """``rows`` as a table (columns from the first row's keys), then the geometric mean of each
    ratio column (``vs_*``, ``ratio``)."""
    from rich.console import Console
    from rich.table import Table

    if not rows:
        return
    means = {
        k: geomean(r.get(k) for r in rows) for k in rows[0] if k.startswith("vs_") or k == "ratio"
    }
    summary = ", ".join(f"{k} {v:.3f}" for k, v in means.items() if v is not None)
    t = Table(title=title, title_justify="left")
    for k in rows[0]:
        t.add_column(k)
    for r in rows:  # by key: a row may have set its keys in another order
        t.add_row(*(cell(r.get(k)) for k in rows[0]))
    console = Console(width=200)
    console.print(t)
    if summary:
        console.print(f"geomean: {summary}")


def write_json(results: dict[str, Any], path: str) -> None:
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend, or None (said on stderr) without it."""
    try:
        import matplotlib
    except ImportError:
        print("aotkernels bench: no matplotlib, no chart", file=sys.stderr)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def speedup_chart(rows: list[Row], path: str, title: str) -> None:
    """Bar chart of our speed-up over the best torch path per shape (norm; PNG)."""
    plt = _pyplot()
    if plt is None:
        return
    labels = [f"{r['op']} {r['dtype']} {'x'.join(map(str, r['shape']))}" for r in rows]
    fig, ax = plt.subplots(figsize=(10, 0.28 * len(rows) + 1.5))
    ax.barh(labels, [r["vs_best_torch"] for r in rows], color="tab:green")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("speed-up over the best torch path (op, eager formula, torch.compile)")
    ax.set_title(title)
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def gemm_label(r: Row) -> str:
    return f"{r['M']}x{r['N']}x{r['K']} {r['b']}" + (f" {r['scales']}" if r["scales"] else "")


def gemm_chart(rows: list[Row], path: str, title: str) -> None:
    """Our ratio over the anchor per shape, one panel per dtype, goals marked (PNG)."""
    plt = _pyplot()
    if plt is None:
        return
    groups = [[r for r in rows if r["dtype"] == d] for d in dict.fromkeys(r["dtype"] for r in rows)]
    fig, axes = plt.subplots(
        len(groups), 1, squeeze=False, figsize=(10, 0.26 * len(rows) + 1.1 * len(groups) + 0.5),
        gridspec_kw={"height_ratios": [len(g) for g in groups]},
    )  # fmt: skip
    for ax, group in zip(axes[:, 0], groups, strict=True):
        colors = [
            "tab:gray" if r["meets"] is None else "tab:green" if r["meets"] else "tab:red"
            for r in group
        ]
        ys = range(len(group))  # positions, not labels: a square can repeat an LLM shape
        bars = ax.barh(ys, [r["ratio"] or 0.0 for r in group], color=colors)
        ax.bar_label(bars, [f"{r['ratio']:.2f}" if r["ratio"] else "no anchor" for r in group],
                     fontsize=6, padding=2)  # fmt: skip
        ax.scatter([r["goal"] for r in group], ys, marker="|", s=120, color="black")
        ax.set_yticks(ys, [gemm_label(r) for r in group])
        ax.axvline(1.0, color="black", linewidth=0.6)
        ax.set_title(f"{group[0]['dtype']} vs {group[0]['anchor']}", fontsize=9, loc="left")
        ax.tick_params(axis="y", labelsize=7)
        ax.invert_yaxis()
    axes[-1, 0].set_xlabel("ours / anchor throughput (bar; | = goal; red misses it)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def gemm_chart_path(chart: str, what: str) -> str:
    """--chart as given for ``bench gemm``; beside the norm chart (``-gemm`` suffix) for all."""
    if what == "gemm":
        return chart
    root, ext = os.path.splitext(chart)
    return f"{root}-gemm{ext or '.png'}"
