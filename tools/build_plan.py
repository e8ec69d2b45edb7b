#!/usr/bin/env python3
"""Write the build plan for CMake (called at configure time by CMakeLists.txt).

Usage: build_plan.py --matrix arch_matrix.toml --toolkit 13.0.88 --out BUILD/plan
Reads AOTKERNELS_ARCHS / AOTKERNELS_FAMILIES from the environment (or --archs/--families).
CUTLASS/CuTe headers (used by the GEMM family) come from AOTKERNELS_CUTLASS_INCLUDE, else from
the installed `nvidia-cutlass` package (cutlass_library/source/include).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from aotkernels._build.matrix import MatrixError, load_matrix
from aotkernels._build.plan import PlanError, check_toolkit, make_plan, summary_line, write_plan


def cutlass_include() -> Path | None:
    """The CUTLASS include folder, found without importing cutlass_library (it imports a lot)."""
    env = os.environ.get("AOTKERNELS_CUTLASS_INCLUDE")
    if env:
        return Path(env)
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    inc = Path(next(iter(spec.submodule_search_locations))) / "source" / "include"
    return inc if (inc / "cute").is_dir() else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix", type=Path, required=True)
    ap.add_argument("--toolkit", required=True, help="nvcc version, e.g. 13.0.88")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--archs", default=os.environ.get("AOTKERNELS_ARCHS") or None)
    ap.add_argument("--families", default=os.environ.get("AOTKERNELS_FAMILIES") or None)
    args = ap.parse_args(argv)
    try:
        matrix = load_matrix(args.matrix)
        plan = make_plan(matrix, check_toolkit(args.toolkit), args.archs, args.families)
    except (MatrixError, PlanError) as e:
        print(f"aotkernels build plan: error: {e}", file=sys.stderr)
        return 1
    inc = cutlass_include()
    write_plan(
        plan,
        args.out,
        args.matrix.resolve().parent / "kernels",
        {"AK_CUTLASS_INCLUDE": inc.as_posix() if inc else ""},
    )
    print(f"aotkernels plan: CUTLASS headers: {inc or 'not found (pip install nvidia-cutlass)'}")
    for fp in plan.families.values():
        print(f"aotkernels plan: {summary_line(fp)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
