#!/usr/bin/env python3
"""Cold-start cost of aotkernels: ``import aotkernels`` and the first ``silu`` in a fresh process.

GPU machine with torch. Each sample is a new Python process that first imports torch and
initialises CUDA (so neither is counted), then times ``import aotkernels`` and the first
``ak.silu(x)`` (manifest read, image choice, fatbin read and sha256, driver load, launch,
synchronize). It also lists the aotkernels modules the process holds after that call, so a
build-time module reached at run time shows up. Prints one JSON object; a measuring tool, not
a test.

    python tools/cold_start.py [--runs 7] [--site DIR]    (DIR: where that aotkernels is installed)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_CHILD = """
import json, sys, time
import torch
x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
t0 = time.perf_counter()
import aotkernels as ak
t1 = time.perf_counter()
ak.silu(x)
torch.cuda.synchronize()
t2 = time.perf_counter()
mods = sorted(m for m in sys.modules if m == "aotkernels" or m.startswith("aotkernels."))
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "first_silu_ms": (t2 - t1) * 1e3,
                  "modules": mods, "file": ak.__file__}))
"""


def sample(site: str | None) -> dict[str, object]:
    env = dict(os.environ)
    if site:
        env["PYTHONPATH"] = site + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--site", help="a folder holding the aotkernels to measure (PYTHONPATH)")
    args = ap.parse_args()
    runs = [sample(args.site) for _ in range(args.runs)]
    report = {
        "file": runs[0]["file"],
        "runs": args.runs,
        "import_ms_median": statistics.median(float(str(r["import_ms"])) for r in runs),
        "first_silu_ms_median": statistics.median(float(str(r["first_silu_ms"])) for r in runs),
        "import_ms": [round(float(str(r["import_ms"])), 2) for r in runs],
        "first_silu_ms": [round(float(str(r["first_silu_ms"])), 2) for r in runs],
        "modules": runs[0]["modules"],
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
