"""Sustained-clock probe: each GEMM runs back to back for a few seconds while nvidia-smi samples
the SM clock, the power draw and the throttle reasons; one JSON line per call with the
throughput, the clock and the dense peak at that clock (8-bit: 8192 operations per SM per
clock, 16-bit: 4096)."""

import json
import subprocess
import time
from collections.abc import Callable

import torch

import aotkernels as ak

SMS = torch.cuda.get_device_properties(0).multi_processor_count
QUERY = "--query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active"


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def probe(name: str, fn: Callable[[], object], flops: float, secs: float = 4.0) -> None:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    smi = subprocess.Popen(
        ["nvidia-smi", QUERY, "--format=csv,noheader,nounits", "-lms", "50"],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.3)
    calls, t0 = 0, time.perf_counter()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    while time.perf_counter() - t0 < secs:
        for _ in range(20):
            fn()
        calls += 20
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / calls
    smi.terminate()
    lines = smi.communicate()[0].strip().splitlines()
    # The first and last samples straddle the loop's start and end.
    rows = [line.split(", ") for line in lines[6:-2] if line.count(",") == 2]
    clocks = [float(r[0]) for r in rows]
    clk = median(clocks)
    result = {
        "name": name,
        "ms": round(ms, 4),
        "tops": round(flops / ms / 1e9, 1),
        "clk_med": clk,
        "clk_min": min(clocks),
        "clk_max": max(clocks),
        "power_med": median([float(r[1]) for r in rows]),
        "reasons": sorted({r[2] for r in rows}),
        "samples": len(rows),
        "dense8_peak_at_clk": round(SMS * 8192 * clk * 1e6 / 1e12, 1),
        "dense16_peak_at_clk": round(SMS * 4096 * clk * 1e6 / 1e12, 1),
    }
    print(json.dumps(result), flush=True)


def shape(n: int) -> None:
    flops = 2 * n**3
    a = torch.randint(-128, 127, (n, n), dtype=torch.int8, device="cuda")
    b = torch.randint(-128, 127, (n, n), dtype=torch.int8, device="cuda").t()
    out = torch.empty(n, n, dtype=torch.int32, device="cuda")
    probe(f"int8 ak {n}", lambda: ak.scaled_mm(a, b, out_dtype=torch.int32, out=out), flops)
    probe(f"int8 _int_mm {n}", lambda: torch._int_mm(a, b), flops)
    fp8 = torch.float8_e4m3fn
    a8 = torch.randn(n, n, device="cuda").to(fp8)
    b8 = torch.randn(n, n, device="cuda").to(fp8).t()
    one = torch.ones((), device="cuda")
    bf16 = torch.bfloat16
    probe(f"fp8 ak {n}", lambda: ak.scaled_mm(a8, b8, one, one, out_dtype=bf16), flops)
    probe(f"fp8 cublas {n}", lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=bf16), flops)
    ah = torch.randn(n, n, device="cuda", dtype=bf16)
    bh = torch.randn(n, n, device="cuda", dtype=bf16).t()
    probe(f"bf16 ak {n}", lambda: ak.matmul(ah, bh), flops)
    probe(f"bf16 cublas {n}", lambda: torch.matmul(ah, bh), flops)


def main() -> None:
    limits = "name,clocks.max.sm,clocks.applications.graphics,power.limit,power.max_limit"
    info = subprocess.run(
        ["nvidia-smi", f"--query-gpu={limits}", "--format=csv"], capture_output=True, text=True
    )
    print(info.stdout)
    for n in (4096, 8192):
        shape(n)


if __name__ == "__main__":
    main()
