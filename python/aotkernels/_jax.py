"""The JAX front end (XLA FFI custom calls), generated from the op declarations.

Placeholder until the XLA extension lands: JAX arrays take the DLPack path of the runner.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["available", "call"]


def available() -> bool:
    """Whether this build has the XLA FFI extension (``aotkernels._xla``)."""
    return False


def call(op: Any, arrays: Sequence[Any], attrs: Mapping[str, Any]) -> Any:
    raise NotImplementedError(f"{op.name}: this build has no XLA FFI extension")
