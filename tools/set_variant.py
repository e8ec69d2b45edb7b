#!/usr/bin/env python3
"""Name the distribution after its CUDA variant before a wheel build, or check a built wheel.

One source tree builds two distributions with the same import name ``aotkernels``:

  aotkernels-cu13  CUDA 13.0 toolkit, NVIDIA driver >= 580 (CUDA 13.x drivers)
  aotkernels-cu12  CUDA 12.4 toolkit (Debian's packages; 12.9 where NVIDIA's archives are
                   reachable), drivers of the CUDA 12.x line: cubins >= 525, its PTX >= 550

``[project] name`` cannot be dynamic (PEP 621) and scikit-build-core's overrides change its own
settings, not the project metadata, so this rewrites the one ``name = ...`` line of
``[project]`` in pyproject.toml (run it on a CI checkout or a copy, as tools/build_wheels.sh
does). ``--check`` reads a built wheel and fails unless its name, its manifest's toolkit major
and its driver floor agree.

Usage: set_variant.py cu13 [--pyproject PATH]      set_variant.py --check WHEEL [WHEEL ...]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import zipfile
from pathlib import Path

VARIANTS = {"cu12": 12, "cu13": 13}
BASE = "aotkernels"
_NAME_RE = re.compile(r'^(name\s*=\s*")([^"]+)(")', re.M)


def set_variant(pyproject: Path, variant: str) -> str:
    """Rewrite ``[project] name`` to ``aotkernels-<variant>``; returns the new name."""
    if variant not in VARIANTS:
        raise SystemExit(f"set_variant: expected one of {', '.join(VARIANTS)}, got {variant!r}")
    text = pyproject.read_text()
    start = text.find("\n[project]\n")
    if start < 0:
        raise SystemExit(f"set_variant: {pyproject} has no [project] table")
    end = text.find("\n[", start + 1)
    table = text[start:end] if end > 0 else text[start:]
    m = _NAME_RE.search(table)
    if m is None or not m.group(2).startswith(BASE):
        raise SystemExit(f'set_variant: no `name = "{BASE}..."` line in [project]')
    name = f"{BASE}-{variant}"
    table = table[: m.start(2)] + name + table[m.end(2) :]
    pyproject.write_text(text[:start] + table + (text[end:] if end > 0 else ""))
    return name


def check_wheel(path: Path) -> str:
    """``aotkernels_cu13-…whl`` must hold a CUDA 13 manifest with driver floor 13.0."""
    dist = path.name.split("-")[0]
    m = re.fullmatch(rf"{BASE}_(cu\d+)", dist)
    if m is None or m.group(1) not in VARIANTS:
        raise SystemExit(f"set_variant: {path.name}: not a variant wheel ({BASE}_cu12/_cu13)")
    major = VARIANTS[m.group(1)]
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read(f"{BASE}/kernels/manifest.json"))
    toolkit, floor = str(manifest["toolkit"]), str(manifest["driver_floor"])
    if int(toolkit.split(".")[0]) != major or floor != f"{major}.0":
        raise SystemExit(
            f"set_variant: {path.name}: built with CUDA {toolkit} (driver floor {floor}), "
            f"but named {m.group(1)}"
        )
    return f"{path.name}: {m.group(1)}, CUDA {manifest['toolkit_full']}, driver >= {floor}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variant", nargs="?", choices=sorted(VARIANTS))
    ap.add_argument("--pyproject", type=Path, default=Path(__file__).parents[1] / "pyproject.toml")
    ap.add_argument("--check", type=Path, nargs="+", metavar="WHEEL")
    args = ap.parse_args(argv)
    if args.check:
        for whl in args.check:
            print(check_wheel(whl))
        return 0
    if args.variant is None:
        ap.error("give a variant (cu12, cu13) or --check WHEEL")
    print(f"set_variant: {args.pyproject}: name = {set_variant(args.pyproject, args.variant)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
