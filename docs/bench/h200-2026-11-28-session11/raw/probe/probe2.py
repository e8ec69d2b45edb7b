"""Does a hot (power-capped) GPU slow our M = 16 / 128 tiles more than cuBLAS? Each row measured
right after 2 s of 8192^3 bf16 matmuls ("hot") and after 3 s idle ("cool"): anchor, the table's
tile and a forced alternative, in alternating rounds; the SM clock sampled right after."""

import statistics
import subprocess
import sys
import time

sys.path.insert(0, sys.argv[1])
import drive  # patches the tile choice so that force() works
import torch

from aotkernels.bench.timing import gpu_samples

ROWS = [
    ("bf16", 16, 4096, 14336, "kk", "wg_16x64tk2"),
    ("bf16", 16, 4096, 14336, "kn", "wg_16x64tk2"),
    ("fp8", 16, 4096, 14336, "kk", "wg_16x64tk2"),
    ("fp8", 128, 4096, 14336, "kk", "wg_128x64"),
]
big = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)


def heat(s: float) -> None:
    t = time.time()
    while time.time() - t < s:
        for _ in range(10):
            big @ big
        torch.cuda.synchronize()


def clock() -> str:
    return subprocess.run(
        ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    ).stdout.strip()


for state in ("cool", "hot", "cool", "hot"):
    for dt, m, n, k, lay, alt in ROWS:
        case = drive.cases(dt, m, n, k, lay)
        for c in ("table", alt):
            drive.force(c)
            case.ours(0)
        drive.force("table")
        torch.cuda.synchronize()
        if state == "hot":
            heat(2.0)
        else:
            time.sleep(3.0)
        s = {"anchor": [], "table": [], alt: []}
        for _ in range(2):
            s["anchor"] += gpu_samples(case.anchor, 50)
            for c in ("table", alt):
                drive.force(c)
                s[c] += gpu_samples(case.ours, 50)
        ck = clock()
        drive.force("table")
        med = {c: statistics.median(v) * 1e3 for c, v in s.items()}
        print(
            f"{state:4s} {dt}:{m}x{n}x{k}:{lay} us "
            + " ".join(f"{c}={v:.2f}" for c, v in med.items())
            + f" | ratio table {med['anchor'] / med['table']:.3f}"
            + f" {alt} {med['anchor'] / med[alt]:.3f} | {ck}",
            flush=True,
        )
        del case
