"""Lazy front-end registration: ``torch.ops.aotkernels`` exists as soon as torch does.

``import aotkernels`` imports neither torch nor JAX. When torch is already imported, the ops are
registered with it right away; otherwise a finder on ``sys.meta_path`` waits for torch's import
to finish and registers them then, so that ``torch.compile`` finds them whatever the import order
(``import aotkernels`` before ``import torch`` is the common, alphabetical one).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__all__ = ["install"]


def _register_torch() -> None:
    try:
        from . import _torch

        _torch.register()
    except Exception as e:  # never break the user's `import torch`
        warnings.warn(
            f"aotkernels: registering torch.ops.aotkernels failed ({type(e).__name__}: {e}); "
            "eager calls still work, torch.compile will not see the ops",
            RuntimeWarning,
            stacklevel=2,
        )


class _AfterTorchImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps torch's own loader so registration runs once torch's module
    has finished executing."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader: Any = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_register(module: ModuleType) -> None:
            exec_module(module)
            _register_torch()

        loader.exec_module = exec_then_register
        return spec


def install() -> None:
    if "torch" in sys.modules:
        _register_torch()
    elif not any(isinstance(f, _AfterTorchImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterTorchImport())
