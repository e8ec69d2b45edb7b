"""The wheel-size budget: ``[tool.aotkernels] wheel-size-budget-mb`` in pyproject.toml.

``AOTKERNELS_WHEEL=path.whl`` (or a folder of wheels) checks built wheels; without it the
installed package is measured (its kernels folder, _core and _xla), which is what its wheel holds
apart from a few kB of Python. MB here is PyPI's: 2**20 bytes (its default upload limit is
"100 MB" = 100 MiB). On failure the message names the families and targets that cost the most.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MB = 2**20


def budget_mb() -> float:
    with (ROOT / "pyproject.toml").open("rb") as f:
        cfg = tomllib.load(f)
    value = cfg.get("tool", {}).get("aotkernels", {}).get("wheel-size-budget-mb")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        pytest.fail(
            f"pyproject.toml: [tool.aotkernels] wheel-size-budget-mb must be > 0, got {value!r}"
        )
    return float(value)


def over_budget(what: str, size: int, budget: float, contents: dict[str, Any] | None) -> str | None:
    """None when ``size`` bytes fit ``budget`` MB, else a message naming what costs the most."""
    if size <= budget * MB:
        return None
    msg = f"{what}: {size / MB:.1f} MB exceeds the wheel-size budget of {budget:g} MB"
    if contents:
        fams = sorted(contents["families"].items(), key=lambda kv: -int(kv[1]["bytes"]))
        tgts = sorted(contents.get("targets", {}).items(), key=lambda kv: -int(kv[1]))
        msg += "; largest families: " + ", ".join(
            f"{n} {f['bytes'] / MB:.1f} MB" for n, f in fams[:5]
        )
        if tgts:
            msg += "; largest targets: " + ", ".join(f"{t} {b / MB:.1f} MB" for t, b in tgts[:5])
    return msg


def _wheels() -> list[Path]:
    spec = os.environ.get("AOTKERNELS_WHEEL")
    if not spec:
        return []
    p = Path(spec)
    wheels = sorted(p.glob("*.whl")) if p.is_dir() else [p]
    if not wheels or not all(w.is_file() for w in wheels):
        pytest.fail(f"AOTKERNELS_WHEEL={spec}: no such wheel (or folder of wheels)")
    return wheels


def test_budget_is_configured() -> None:
    assert budget_mb() > 0


def test_over_budget_reports_the_largest_parts() -> None:
    """Positive control: the check does fire, and says where the bytes go."""
    contents = {
        "families": {"gemm": {"bytes": 3 * MB}, "norm": {"bytes": MB}},
        "targets": {"sm_90a": 2 * MB, "sm_80": MB},
    }
    assert over_budget("x.whl", 4 * MB, 4, contents) is None
    msg = over_budget("x.whl", 4 * MB + 1, 4, contents)
    assert msg is not None
    assert "exceeds the wheel-size budget of 4 MB" in msg
    assert msg.index("gemm 3.0 MB") < msg.index("norm 1.0 MB")
    assert "largest targets: sm_90a 2.0 MB" in msg


def test_wheel_within_budget(request: pytest.FixtureRequest) -> None:
    from aotkernels.contents import inspect_path

    budget = budget_mb()
    wheels = _wheels()
    problems = []
    if wheels:
        for whl in wheels:
            problem = over_budget(str(whl), whl.stat().st_size, budget, inspect_path(whl))
            if problem:
                problems.append(problem)
    else:
        kernels: Path = request.getfixturevalue("installed_kernels")
        package = kernels.parent
        files = [p for p in kernels.iterdir() if p.is_file()]
        files += sorted(package.glob("_core*.so")) + sorted(package.glob("_xla*.so"))
        size = sum(p.stat().st_size for p in files)
        assert size > 0
        problem = over_budget(
            f"installed {package} (estimate)", size, budget, inspect_path(kernels)
        )
        if problem:
            problems.append(problem)
    assert not problems, "\n".join(problems)
