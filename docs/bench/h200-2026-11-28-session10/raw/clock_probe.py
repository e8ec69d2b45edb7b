"""Sustained-clock probe: run one GEMM back to back for a few seconds while nvidia-smi samples
the SM clock, power and throttle reasons; print throughput and the clock-adjusted peak."""
import json, subprocess, sys, time
import torch
import aotkernels as ak

SMS = torch.cuda.get_device_properties(0).multi_processor_count
def probe(name, fn, flops, secs=4.0):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active",
                            "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    n = 0; t0 = time.perf_counter()
    s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
    s.record()
    while time.perf_counter() - t0 < secs:
        for _ in range(20): fn()
        n += 20
        torch.cuda.synchronize()
    e.record(); torch.cuda.synchronize()
    ms = s.elapsed_time(e) / n
    smi.terminate(); out = smi.communicate()[0].strip().splitlines()
    rows = [l.split(", ") for l in out[6:-2] if l.count(",") == 2]
    clk = sorted(float(r[0]) for r in rows); pw = sorted(float(r[1]) for r in rows)
    reasons = sorted({r[2] for r in rows})
    med = clk[len(clk)//2]
    tops = flops / ms / 1e9
    print(json.dumps(dict(name=name, ms=round(ms, 4), tops=round(tops, 1), clk_med=med, clk_min=clk[0],
          clk_max=clk[-1], power_med=pw[len(pw)//2], reasons=reasons, samples=len(rows),
          dense8_peak_at_clk=round(SMS*8192*med*1e6/1e12, 1), dense16_peak_at_clk=round(SMS*4096*med*1e6/1e12, 1))), flush=True)

print(subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.max.sm,clocks.applications.graphics,power.limit,power.max_limit",
                      "--format=csv"], capture_output=True, text=True).stdout)
for n in (4096, 8192):
    a = torch.randint(-128, 127, (n, n), dtype=torch.int8, device="cuda")
    b = torch.randint(-128, 127, (n, n), dtype=torch.int8, device="cuda").t()
    out = torch.empty(n, n, dtype=torch.int32, device="cuda")
    fl = 2 * n**3
    probe(f"int8 ak {n}", lambda: ak.scaled_mm(a, b, out_dtype=torch.int32, out=out), fl)
    probe(f"int8 _int_mm {n}", lambda: torch._int_mm(a, b), fl)
    a8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn); b8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")
    probe(f"fp8 ak {n}", lambda: ak.scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16), fl)
    probe(f"fp8 cublas {n}", lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16), fl)
    ah = torch.randn(n, n, device="cuda", dtype=torch.bfloat16); bh = torch.randn(n, n, device="cuda", dtype=torch.bfloat16).t()
    probe(f"bf16 ak {n}", lambda: ak.matmul(ah, bh), fl)
    probe(f"bf16 cublas {n}", lambda: torch.matmul(ah, bh), fl)
