"""Benchmarks of aotkernels beside their anchors (``aotkernels bench``, ``python -m
aotkernels.bench``): shared timing (``timing``), the reference formulas that the tests and the
benchmarks check results against (``reference``), one module per suite with ``run(args)``
returning its rows, and the tables, charts and JSON (``report``). Not imported by
``import aotkernels``; needs torch at run time."""

from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """``aotkernels bench`` with ``argv``; 0, or 1 when a result failed its check."""
    from .cli import main as run

    return run(argv)
