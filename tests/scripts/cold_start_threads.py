"""32 threads call ops for the first time at once, each on its own stream (docs/reliability.md,
"Thread safety").

Prints one JSON line: how often each family was loaded and whether all results agree.
"""

import json
import threading

import torch

import aotkernels as ak
from aotkernels import loader

loads: list[str] = []
real_load = loader._load


def counting_load(name, dev):  # type: ignore[no-untyped-def]
    loads.append(name)
    return real_load(name, dev)


loader._load = counting_load
x = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
barrier = threading.Barrier(32)
results: list[torch.Tensor] = [None] * 32  # type: ignore[list-item]
errors: list[str] = []


def worker(i: int) -> None:
    s = torch.cuda.Stream()
    try:
        barrier.wait()
        with torch.cuda.stream(s):
            y = ak.silu(x) if i % 2 else ak.silu_and_mul(x)
        s.synchronize()
        results[i] = y
    except Exception as e:  # reported, not swallowed
        errors.append(repr(e))


threads = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
for t in threads:
    t.start()
for t in threads:
    t.join()
same = all(torch.equal(results[i], results[i % 2]) for i in range(32)) if not errors else False
print(json.dumps({"loads": sorted(loads), "errors": errors, "identical": same}))
