"""Golden stubs: the checked-in ``_core.pyi`` / ``_xla.pyi`` are what nanobind's stubgen writes
for the built extensions, with the options the build uses (CMakeLists.txt: docstrings kept,
values left out, ``src/xla_stub.patterns`` applied to ``_xla``).

A binding changed in src/*.cpp without regenerating its stub fails here. Regenerate from the
rebuilt module with ``python -m nanobind.stubgen -q --exclude-values -m aotkernels._core
-o python/aotkernels/_core.pyi`` (``_xla``: add ``-p src/xla_stub.patterns``), on Python 3.11
or 3.12 with the nanobind that pyproject.toml's build requirements pin.
"""

from __future__ import annotations

import importlib
import re
import sys
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
    if sys.version_info >= (3, 13):
        pytest.skip(
            "stubgen spells the capsule type types.CapsuleType from Python 3.13 on; the "
            "checked-in stubs are the typing_extensions spelling, valid on every Python"
        )
    try:
        import nanobind
        from nanobind.stubgen import StubGen, load_pattern_file
    except (ImportError, RuntimeError) as e:  # RuntimeError: Python 3.10 without typing_extensions
        pytest.skip(f"nanobind's stubgen is not usable here ({e}): pip install nanobind")
    pin = re.search(r'"nanobind==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    if pin is not None and nanobind.__version__ != pin.group(1):
        pytest.skip(
            f"nanobind {nanobind.__version__} is installed; the stubs are written by the "
            f"build's {pin.group(1)}, whose stubgen may format differently"
        )
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
