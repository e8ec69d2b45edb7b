"""``aotkernels bench``: our kernels beside their anchors, measured in the same run.

Subcommands:
  launch       host cost of one call: ours (with and without out=), torch's own op, a CuPy
               RawKernel and cuda.core ``launch`` of an equivalent kernel
  elementwise  bandwidth of each activation / gated op vs torch eager, torch.compile and the
               device copy bandwidth, at small, medium and large sizes
  norm         rms_norm, fused_add_rms_norm, layer_norm, softmax vs torch's own op (F.rms_norm,
               F.layer_norm, torch.softmax), the eager formula and torch.compile of it, on
               16384 x {1024, 4096, 8192} and decode-like {1, 32, 256} x {4096, 8192}

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
    ops = [o for o in args.ops.split(",") if o in cases] if args.ops else list(cases)
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


def _norm_cases(torch: Any, eps: float = 1e-6) -> dict[str, Any]:
    """op -> (ours, torch's own op or None, eager formula, bytes moved per element pass count)."""
    import torch.nn.functional as F

    import aotkernels as ak

    def rms_formula(x: Any, w: Any) -> Any:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w

    def fused_formula(x: Any, r: Any, w: Any) -> Any:
        r = x + r
        return rms_formula(r, w), r

    def ln_formula(x: Any, w: Any, b: Any) -> Any:
        xf = x.float()
        mu = xf.mean(-1, keepdim=True)
        var = (xf - mu).pow(2).mean(-1, keepdim=True)
        return ((xf - mu) * torch.rsqrt(var + 1e-5)).to(x.dtype) * w + b

    def sm_formula(x: Any) -> Any:
        xf = x.float()
        e = torch.exp(xf - xf.amax(-1, keepdim=True))
        return (e / e.sum(-1, keepdim=True)).to(x.dtype)

    return {
        # name: (ours, torch op, formula, arrays read + written per element)
        "rms_norm": (lambda x, r, w, b: ak.rms_norm(x, w, eps),
                     lambda x, r, w, b: F.rms_norm(x, (x.shape[-1],), w, eps),
                     lambda x, r, w, b: rms_formula(x, w), 2),
        "fused_add_rms_norm": (lambda x, r, w, b: ak.fused_add_rms_norm(x, r, w, eps), None,
                               lambda x, r, w, b: fused_formula(x, r, w), 4),
        "layer_norm": (lambda x, r, w, b: ak.layer_norm(x, w, b, 1e-5),
                       lambda x, r, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
                       lambda x, r, w, b: ln_formula(x, w, b), 2),
        "softmax": (lambda x, r, w, b: ak.softmax(x), lambda x, r, w, b: torch.softmax(x, -1),
                    lambda x, r, w, b: sm_formula(x), 2),
    }  # fmt: skip


def _time_norm(fn: Callable[..., Any], xs: list[Any], rs: list[Any], w: Any, b: Any) -> float:
    """Median ms of ``fn(x, residual, weight, bias)``, rotating through the input sets."""
    return time_gpu(lambda i: fn(xs[i % len(xs)], rs[i % len(rs)], w, b))


def bench_norm(args: argparse.Namespace) -> list[dict[str, Any]]:
    torch = _torch()
    shapes = [(16384, 1024), (16384, 4096), (16384, 8192), (1, 4096), (32, 4096), (256, 4096),
              (1, 8192), (32, 8192), (256, 8192)]  # fmt: skip
    cases = _norm_cases(torch)
    ops = [o for o in args.ops.split(",") if o in cases] if args.ops else list(cases)
    rows: list[dict[str, Any]] = []
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[dtype_name])
        size = torch.finfo(dtype).bits // 8
        for shape in shapes:
            nbytes = shape[0] * shape[1] * size
            sets = max(1, min(16, L2_ROTATE_BYTES // (4 * nbytes)))
            xs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(sets)]
            rs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(sets)]
            w = torch.randn(shape[1], device="cuda", dtype=dtype)
            b = torch.randn(shape[1], device="cuda", dtype=dtype)
            dst = torch.empty_like(xs[0])
            copy_tbs = 2 * nbytes / rotating(dst.copy_, xs) / 1e9
            for op in ops:
                ours, native, formula, passes = cases[op]
                moved = passes * nbytes + 2 * shape[1] * size

                t_ours = _time_norm(ours, xs, rs, w, b)
                t_native = _time_norm(native, xs, rs, w, b) if native else None
                t_eager = _time_norm(formula, xs, rs, w, b)
                t_comp = None
                if not args.no_compile:
                    t_comp = _time_norm(torch.compile(formula, dynamic=False), xs, rs, w, b)
                best = min(t for t in (t_native, t_eager, t_comp) if t)
                tbs = moved / t_ours / 1e9
                rows.append({
                    "op": op, "dtype": dtype_name, "shape": list(shape), "ours_TBps": tbs,
                    "torch_op_TBps": moved / t_native / 1e9 if t_native else None,
                    "eager_TBps": moved / t_eager / 1e9,
                    "compile_TBps": moved / t_comp / 1e9 if t_comp else None,
                    "copy_TBps": copy_tbs,
                    "vs_torch_op": t_native / t_ours if t_native else None,
                    "vs_eager": t_eager / t_ours,
                    "vs_compile": t_comp / t_ours if t_comp else None,
                    "vs_best_torch": best / t_ours,
                    "of_copy": tbs / copy_tbs,
                })  # fmt: skip
            xs.clear()
            rs.clear()
            torch.cuda.empty_cache()
    return rows


def chart(rows: list[dict[str, Any]], path: str, title: str) -> None:
    """Bar chart of our speed-up over the best torch path per shape (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['op']} {r['dtype']} {'x'.join(map(str, r['shape']))}" for r in rows]
    fig, ax = plt.subplots(figsize=(10, 0.28 * len(rows) + 1.5))
    ax.barh(labels, [r["vs_best_torch"] for r in rows], color="tab:green")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("speed-up over the best torch path (op, eager formula, torch.compile)")
    ax.set_title(title)
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


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
    ap.add_argument("what", choices=["launch", "elementwise", "norm", "all"])
    ap.add_argument("--chart", help="write a PNG chart (norm) to this file")
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--calls", type=int, default=20000, help="calls per host-cost round")
    ap.add_argument("--ops", help="comma-separated ops (elementwise)")
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile anchor")
    args = ap.parse_args(argv)
    torch = _torch()
    if args.ops:  # each suite runs the ops it knows; a name no suite knows is a typo
        known = {*_elementwise_cases(torch), *_norm_cases(torch)}
        unknown = sorted(set(args.ops.split(",")) - known)
        if unknown:
            ap.error(f"--ops: unknown {unknown} (known: {sorted(known)})")
    results: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    if args.what in ("launch", "all"):
        results["launch"] = bench_launch(args)
        _print(results["launch"], "host cost per call (µs)")
    if args.what in ("elementwise", "all"):
        results["elementwise"] = bench_elementwise(args)
        _print(results["elementwise"], "elementwise bandwidth (TB/s) and ratios")
    if args.what in ("norm", "all"):
        results["norm"] = bench_norm(args)
        _print(results["norm"], "norm / softmax bandwidth (TB/s) and ratios")
        if args.chart:
            chart(results["norm"], args.chart, f"norm and softmax on {results['device']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
