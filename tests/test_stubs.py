"""Golden stubs: the checked-in ``_core.pyi`` / ``_xla.pyi`` are what nanobind's stubgen writes
for the built extensions, with the options the build uses (CMakeLists.txt: docstrings kept,
values left out, ``src/xla_stub.patterns`` applied to ``_xla``).

A binding changed in src/*.cpp without regenerating its stub fails here. Regenerate from the
rebuilt module with ``python -m nanobind.stubgen -q --exclude-values -m aotkernels._core
-o python/aotkernels/_core.pyi`` (``_xla``: add ``-p src/xla_stub.patterns``).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATTERNS = {"_xla": ROOT / "src" / "xla_stub.patterns"}


def _module(name: str) -> ModuleType:
    try:
        return importlib.import_module(f"aotkernels.{name}")
    except ImportError as e:
        why = (
            "it is built only where jaxlib's XLA FFI headers were importable at build time"
            if name == "_xla"
            else "the extension is not built"
        )
        pytest.skip(f"aotkernels.{name} is not importable ({e}): {why}")


def _stubgen(module: ModuleType, patterns: Path | None) -> str:
    try:
        from nanobind.stubgen import StubGen, load_pattern_file
    except ImportError as e:
        pytest.skip(f"nanobind's stubgen is not importable ({e}): pip install nanobind")
    gen = StubGen(
        module,
        max_expr_length=0,  # --exclude-values: no build-dependent value in the stub
        patterns=load_pattern_file(str(patterns)) if patterns else None,
    )
    gen.put(module)
    return str(gen.get())


@pytest.mark.parametrize("name", ["_core", "_xla"])
def test_checked_in_stub_matches_stubgen(name: str) -> None:
    module = _module(name)
    checked_in = ROOT / "python" / "aotkernels" / f"{name}.pyi"
    generated = _stubgen(module, PATTERNS.get(name))
    assert checked_in.read_text() == generated, (
        f"{checked_in.relative_to(ROOT)} differs from stubgen's output for {module.__file__}; "
        "regenerate it (see this file's docstring)"
    )
