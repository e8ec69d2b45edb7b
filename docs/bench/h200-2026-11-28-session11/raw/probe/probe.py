"""Why bench gemm reads ours slower than drive.py on short rows: host enqueue cost per call, and
gpu_samples medians by reps and by the GPU sleep queued ahead of the timed calls."""

import statistics
import time

import torch

import aotkernels as ak
from aotkernels.bench import gemm as bg
from aotkernels.bench import timing

rows = [
    ("bf16", 16, 4096, 14336, 0),
    ("bf16", 16, 4096, 14336, 1),
    ("fp8", 128, 4096, 14336, 0),
    ("bf16", 16, 4096, 4096, 0),
    ("fp8", 16, 4096, 4096, 0),
]
for dt, m, n, k, which in rows:
    shape = bg.GemmShape("llm", m, n, k)
    cs = (
        bg._float_cases(torch, ak, "bf16", shape)
        if dt == "bf16"
        else bg._fp8_cases(torch, ak, shape, ("tensor",), False)
    )
    case = cs[which]
    for name, fn in (("ours", case.ours), ("anchor", case.anchor)):
        for i in range(5):
            fn(i)
        torch.cuda.synchronize()
        torch.cuda._sleep(400 * 50 * 2000)
        t = time.perf_counter()
        for i in range(200):
            fn(i)
        host = (time.perf_counter() - t) / 200 * 1e6
        torch.cuda.synchronize()
        res = {}
        for hide in (50, 200):
            timing.HIDE_LAUNCH_US = hide
            for reps in (20, 50, 100):
                s = timing.gpu_samples(fn, reps)
                res[f"h{hide}r{reps}"] = round(statistics.median(s) * 1e3, 2)
        timing.HIDE_LAUNCH_US = 50
        print(
            f"{dt} {m}x{n}x{k} {case.b_layout} {name}: host {host:.1f} us/call; "
            f"gpu median us {res}",
            flush=True,
        )
