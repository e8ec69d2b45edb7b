"""Ops stopped right after their validation, for the CPU tests of bad input.

A test that expects a typed validation error must not pass because a later step failed in its
place. With ``stop_after_validation`` in force, loading the family, allocating an output and
launching all raise ``Reached``: an error that comes later than validation shows up as
``Reached`` instead, and no fake pointer is ever launched (on a GPU machine either).
"""

from __future__ import annotations

from typing import Any

import pytest

from aotkernels import arrays, loader
from aotkernels.ops import _op


class Reached(Exception):
    """Validation passed: the op went on to load the family, allocate or launch."""


def stop_after_validation(monkeypatch: pytest.MonkeyPatch, *env: str) -> None:
    """Loading, allocating and launching raise ``Reached`` for the rest of the test; no launch
    plan is cached, and the path-forcing variables ``env`` are unset."""

    def reached(*args: Any, **kwargs: Any) -> Any:
        raise Reached

    monkeypatch.setattr(loader, "family_on", reached)
    monkeypatch.setattr(arrays.Framework, "empty", reached)
    monkeypatch.setattr(_op, "_PLANS", {})
    for var in env:
        monkeypatch.delenv(var, raising=False)
