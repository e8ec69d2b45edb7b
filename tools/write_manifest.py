#!/usr/bin/env python3
"""Write manifest.json from the build plan and check it against the built fatbins.

Usage: write_manifest.py --plan plan.json --matrix arch_matrix.toml --toolkit 13.0.88
                         --out DIR family=path/to/object.fatbin ...
Fails (exit 1) when a fatbin's images, or the kernels of one of them, differ from the plan.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from aotkernels._build.manifest_writer import write_manifest
from aotkernels.fatbin import FatbinError
from aotkernels.manifest import ManifestError


def _version(pyproject: Path) -> str:
    import re

    m = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.M)
    return m.group(1) if m else "0+unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", type=Path, required=True)
    ap.add_argument("--matrix", type=Path, required=True)
    ap.add_argument("--toolkit", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("fatbins", nargs="+", help="family=path")
    args = ap.parse_args(argv)
    plan = json.loads(args.plan.read_text())
    fatbins = dict(item.split("=", 1) for item in args.fatbins)
    version = _version(args.matrix.parent / "pyproject.toml")
    counts: dict[str, dict[str, int]] = {}
    # Set by tools/cuda_toolchain.py's environment and by the build backend's PyPI compiler.
    origin = os.environ.get("AOTKERNELS_TOOLKIT_ORIGIN") or None
    try:
        manifest = write_manifest(
            plan,
            {k: Path(v) for k, v in fatbins.items()},
            args.out,
            toolkit=args.toolkit,
            package_version=version,
            kernel_counts=counts,
            toolkit_origin=origin,
        )
    except (ManifestError, FatbinError, OSError) as e:
        print(f"aotkernels manifest: error: {e}", file=sys.stderr)
        return 1
    for name, fam in manifest["families"].items():
        imgs = " ".join(i["target"] for i in fam["images"])
        print(f"aotkernels manifest: {name}.fatbin {fam['bytes']:,} B checked: {imgs}")
        kernels = ", ".join(f"{t} {n}" for t, n in counts[name].items())
        print(f"aotkernels manifest: {name} kernels per image, as planned: {kernels}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
