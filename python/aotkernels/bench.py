"""``aotkernels bench``: our kernels beside their anchors, measured in the same run.

Subcommands:
  launch       host cost of one call: ours (with and without out=), torch's own op, a CuPy
               RawKernel and cuda.core ``launch`` of an equivalent kernel
  elementwise  bandwidth of each activation / gated op vs torch eager, torch.compile and the
               device copy bandwidth, at small, medium and large sizes

Method (PERFORMANCE.md): CUDA events, warm-up, median of many repeats, random data, inputs
rotated when they fit in L2. Bytes count each input read once and each output written once.
Prints a table, writes JSON with ``--json PATH``. Needs torch (the anchors are torch's).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["main"]

L2_ROTATE_BYTES = 256 << 20  # rotate through inputs until this many bytes: beats a 50-60 MB L2


def _torch() -> Any:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("aotkernels bench: needs a CUDA GPU and torch")
    return torch


def time_gpu(fn: Callable[[int], Any], reps: int = 50, warmup: int = 5) -> float:
    """Median milliseconds of ``fn(i)`` over ``reps`` calls, each timed by CUDA events."""
    torch = _torch()
    for i in range(warmup):
        fn(i)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    torch.cuda.synchronize()
    for i in range(reps):
        starts[i].record()
        fn(i)
        ends[i].record()
    torch.cuda.synchronize()
    return float(statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)))


def rotating(fn: Callable[[Any], Any], inputs: list[Any]) -> float:
    """Median ms of ``fn`` over calls that rotate through ``inputs`` (defeats the L2)."""
    return time_gpu(lambda i: fn(inputs[i % len(inputs)]))


def host_us(fn: Callable[[], Any], calls: int = 20000, rounds: int = 5) -> float:
    """Median over rounds of host microseconds per call (GPU work is tiny; queue never fills)."""
    torch = _torch()
    for _ in range(1000):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


_RELU_SRC = r"""
extern "C" __global__ void relu_f32(const float* x, float* y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] < 0.f ? 0.f : x[i];
}
"""


def bench_launch(args: argparse.Namespace) -> list[dict[str, Any]]:
    torch = _torch()
    import aotkernels as ak

    n = 1024
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    rows: list[dict[str, Any]] = []

    def add(name: str, fn: Callable[[], Any] | None, note: str = "") -> None:
        us = host_us(fn, calls=args.calls) if fn is not None else None
        rows.append({"path": name, "us_per_call": us, "note": note})

    add("aotkernels relu(x)", lambda: ak.relu(x))
    add("aotkernels relu(x, out=y)", lambda: ak.relu(x, out=y))
    add("torch.relu(x)", lambda: torch.relu(x))
    add("torch.add(x, 1, out=y)", lambda: torch.add(x, 1, out=y))
    try:
        import cupy as cp

        k = cp.RawKernel(_RELU_SRC, "relu_f32")
        cx, cy = cp.asarray(x), cp.empty(n, dtype=cp.float32)
        add("CuPy RawKernel", lambda: k((4,), (256,), (cx, cy, cp.int64(n))))
    except Exception as e:  # report why the anchor is missing rather than skip silently
        add("CuPy RawKernel", None, f"unavailable: {e}")
    try:
        from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch

        dev = Device()
        dev.set_current()
        prog = Program(_RELU_SRC, code_type="c++", options=ProgramOptions(arch=f"sm_{dev.arch}"))
        kern = prog.compile("cubin").get_kernel("relu_f32")
        stream = dev.create_stream()
        cfg = LaunchConfig(grid=4, block=256)
        import numpy as np

        nn = np.int64(n)
        add("cuda.core launch", lambda: launch(stream, cfg, kern, x.data_ptr(), y.data_ptr(), nn))
    except Exception as e:
        add("cuda.core launch", None, f"unavailable: {e}")
    base = rows[2]["us_per_call"]
    for r in rows:
        r["ratio_to_torch_relu"] = (r["us_per_call"] / base) if r["us_per_call"] else None
    return rows


def _elementwise_cases(
    torch: Any,
) -> dict[str, tuple[Callable[..., Any], Callable[..., Any], bool]]:
    import torch.nn.functional as F

    import aotkernels as ak

    def gated(act: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def f(x: Any) -> Any:
            d = x.shape[-1] // 2
            return act(x[..., :d]) * x[..., d:]

        return f

    return {  # name: (ours, torch eager formula, halves the last dim)
        "relu": (ak.relu, torch.relu, False),
        "gelu": (ak.gelu, F.gelu, False),
        "gelu_tanh": (
            lambda x: ak.gelu(x, approximate="tanh"),
            lambda x: F.gelu(x, approximate="tanh"),
            False,
        ),
        "silu": (ak.silu, F.silu, False),
        "sigmoid": (ak.sigmoid, torch.sigmoid, False),
        "silu_and_mul": (ak.silu_and_mul, gated(F.silu), True),
        "gelu_and_mul": (ak.gelu_and_mul, gated(F.gelu), True),
    }


def bench_elementwise(args: argparse.Namespace) -> list[dict[str, Any]]:
    torch = _torch()
    sizes = {"small": (64, 1024), "medium": (4096, 4096), "large": (16384, 8192)}
    cases = _elementwise_cases(torch)
    ops = args.ops.split(",") if args.ops else list(cases)
    rows: list[dict[str, Any]] = []
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[dtype_name])
        for size_name, shape in sizes.items():
            nbytes = shape[0] * shape[1] * torch.finfo(dtype).bits // 8
            sets = max(1, min(16, L2_ROTATE_BYTES // nbytes))
            xs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(sets)]
            dst = torch.empty_like(xs[0])
            copy_tbs = 2 * nbytes / rotating(dst.copy_, xs) / 1e9
            for op in ops:
                ours, eager, halves = cases[op]
                moved = nbytes + (nbytes // 2 if halves else nbytes)
                t_ours = rotating(ours, xs)
                t_eager = rotating(eager, xs)
                t_comp = None
                if not args.no_compile:
                    t_comp = rotating(torch.compile(eager, dynamic=False), xs)
                tbs = moved / t_ours / 1e9
                rows.append({
                    "op": op, "dtype": dtype_name, "size": size_name, "shape": list(shape),
                    "ours_TBps": tbs, "eager_TBps": moved / t_eager / 1e9,
                    "compile_TBps": moved / t_comp / 1e9 if t_comp else None,
                    "copy_TBps": copy_tbs,
                    "vs_eager": t_eager / t_ours,
                    "vs_compile": (t_comp / t_ours) if t_comp else None,
                    "of_copy": tbs / copy_tbs,
                })  # fmt: skip
            xs.clear()
            torch.cuda.empty_cache()
    return rows


def _print(rows: list[dict[str, Any]], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    if not rows:
        return
    t = Table(title=title, title_justify="left")
    for k in rows[0]:
        t.add_column(k)
    for r in rows:
        t.add_row(
            *(
                "" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)
                for v in r.values()
            )
        )
    Console(width=200).print(t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="aotkernels bench", description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["launch", "elementwise", "all"])
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--calls", type=int, default=20000, help="calls per host-cost round")
    ap.add_argument("--ops", help="comma-separated ops (elementwise)")
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile anchor")
    args = ap.parse_args(argv)
    torch = _torch()
    results: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    if args.what in ("launch", "all"):
        results["launch"] = bench_launch(args)
        _print(results["launch"], "host cost per call (µs)")
    if args.what in ("elementwise", "all"):
        results["elementwise"] = bench_elementwise(args)
        _print(results["elementwise"], "elementwise bandwidth (TB/s) and ratios")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
