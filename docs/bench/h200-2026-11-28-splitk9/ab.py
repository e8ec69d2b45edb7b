"""One process of the bench's own GEMM rows at M <= 32 (bench gemm --shapes llm, M = 16; int8
M = 32), with this build's table ("table") or with its K-split picks replaced by the unsplit
64-column swapped tile ("unsplit", main's pick). Writes the rows as JSON."""

from __future__ import annotations

import argparse
import json
import sys

from aotkernels.bench import gemm as bg
from aotkernels.ops import gemm

cfg, out = sys.argv[1], sys.argv[2]
shapes0 = bg.shapes
bg.shapes = lambda kinds, quick: [s for s in shapes0(kinds, quick) if s.m <= 16]
if cfg == "unsplit":
    tile0 = gemm._wgmma_tile

    def tile(*args, **kwargs):  # type: ignore[no-untyped-def]
        return tile0(*args, **kwargs).replace("tk2", "t")

    gemm._wgmma_tile = tile
args = argparse.Namespace(
    shapes="llm", dtypes="bf16,fp8,int8", quick=False, reps=50, fast_accum=False
)
rows = bg.run(args)
with open(out, "w") as f:
    json.dump(rows, f)
print(cfg, " ".join(f"{r['ratio']:.3f}" for r in rows), flush=True)
