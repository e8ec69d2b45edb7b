"""Two threads drive cuda:0 and cuda:1 at once, from a cold start (no family loaded yet).

Each thread leaves its current device at 0 and passes arrays of its own GPU; before every round
it queues a ~10 ms spin and then the input's data on that GPU's current stream, so an op that
launched anywhere else (another device, another stream) would read the stale input. Prints one
JSON line: errors, result mismatches, the devices results landed on, each thread's current
device after its calls, and which (family, device) pairs were loaded (each must load once).
"""

import json
import threading

import torch

import aotkernels as ak
from aotkernels import loader

ROUNDS = 20
loads: list[list[object]] = []
real_load = loader._load


def counting_load(name, dev):  # type: ignore[no-untyped-def]
    loads.append([name, dev.index])
    return real_load(name, dev)


loader._load = counting_load
barrier = threading.Barrier(2)
errors: list[str] = []
mismatches: list[str] = []
result_devices: set[str] = set()
current_after: dict[int, int] = {}


def worker(k: int) -> None:
    dev = torch.device("cuda", k)
    g = torch.Generator(device=dev)
    g.manual_seed(k)
    src = torch.randn(2048, 1024, device=dev, generator=g).to(torch.bfloat16)
    w = (torch.rand(1024, device=dev, generator=g) + 0.5).to(torch.bfloat16)
    b = torch.randint(-2, 3, (1024, 256), device=dev, generator=g).to(torch.bfloat16)
    a_src = torch.randint(-2, 3, (2048, 1024), device=dev, generator=g).to(torch.bfloat16)
    x = torch.full_like(src, float("nan"))
    a = torch.full_like(a_src, float("nan"))
    refs = {
        "relu": torch.relu(src.float()),
        "silu_and_mul": torch.nn.functional.silu(src[:, :512].float()) * src[:, 512:].float(),
        "rms_norm": (
            src.double()
            * (src.double().square().mean(-1, keepdim=True) + 1e-6).rsqrt()
            * w.double()
        ).float(),
        "softmax": torch.softmax(src.double(), -1).float(),
        "matmul": (a_src.float() @ b.float()).to(torch.bfloat16).float(),
    }
    torch.cuda.synchronize(dev)
    try:
        barrier.wait()
        for _ in range(ROUNDS):
            with torch.cuda.device(dev):
                torch.cuda._sleep(20_000_000)  # the data lands after ~10 ms on this stream
                x.copy_(src)
                a.copy_(a_src)
            # current device: 0 in both threads
            outs = {
                "relu": ak.relu(x),
                "silu_and_mul": ak.silu_and_mul(x),
                "rms_norm": ak.rms_norm(x, w, 1e-6),
                "softmax": ak.softmax(x),
                "matmul": ak.matmul(a, b),
            }
            current_after[k] = torch.cuda.current_device()
            torch.cuda.synchronize(dev)
            for name, y in outs.items():
                result_devices.add(f"{k}->{y.device}")
                tol = 0 if name == "matmul" else 1e-2
                if not torch.allclose(y.float(), refs[name], rtol=tol, atol=tol * 1e-2):
                    mismatches.append(f"cuda:{k} {name}")
            x.fill_(float("nan"))
            a.fill_(float("nan"))
    except Exception as e:  # reported, not swallowed
        errors.append(f"cuda:{k}: {e!r}")


threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(
    json.dumps(
        {
            "errors": errors,
            "mismatches": sorted(set(mismatches)),
            "result_devices": sorted(result_devices),
            "current_after": {str(k): v for k, v in sorted(current_after.items())},
            "loads": sorted(loads),
        }
    )
)
