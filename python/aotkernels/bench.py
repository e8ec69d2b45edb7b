"""``aotkernels bench``: our kernels beside their anchors, measured in the same run.

Subcommands:
  launch       host cost of one call: ours (with and without out=), torch's own op, a CuPy
               RawKernel and cuda.core ``launch`` of an equivalent kernel
  elementwise  bandwidth of each activation / gated op vs torch eager, torch.compile and the
               device copy bandwidth, at small, medium and large sizes
  norm         rms_norm, fused_add_rms_norm, layer_norm, softmax vs torch's own op (F.rms_norm,
               F.layer_norm, torch.softmax), the eager formula and torch.compile of it, on
               16384 x {1024, 4096, 8192} and decode-like {1, 32, 256} x {4096, 8192}
  quant        fp8 (e4m3) outputs: rms_norm / fused_add_rms_norm / layer_norm / silu_and_mul with
               a static or per-token scale and quantize_fp8 (static, per token, per tensor,
               1x128 groups) vs the two-op torch sequence (torch's op, then scale, clamp and
               .to(float8)) and torch.compile of it, on 16384 x {4096, 8192} and {1, 256} x 4096
               (--quick: 16384 x 4096); TB/s and the fraction of copy bandwidth (a copy of x)
  jax          host cost of one call under jax.jit: ak.silu / ak.rms_norm (one XLA FFI custom
               call each) beside the jnp formula under jit; eager JAX calls through the FFI path
               beside jnp eager and the DLPack path (launch, then a host synchronisation) that
               builds without the XLA extension take
  gemm         ak.matmul (bf16, f16; b K-major as nn.Linear's W.t() and b row-major) vs
               torch.matmul (cuBLAS), ak.scaled_mm fp8 e4m3 (per-tensor, per-row/col and
               DeepSeek block scales) vs torch._scaled_mm, int8 vs torch._int_mm; square
               {1024..8192}^3 and LLM layers M {16, 128, 1024, 8192} x (N, K) {(4096, 4096),
               (14336, 4096), (4096, 14336), (8192, 8192)}; TFLOP/s (2*M*N*K), ratio, goal
  rope         ak.rope in place on q / k slices of a fused QKV buffer (Llama-3-8B heads: 32 q,
               8 kv, head_dim 128; NeoX full and half rotary, GPT-J) vs the transformers
               formula (rotate_half, out of place) eager and under torch.compile, tokens
               {1, 32, 4096, 16384}
  batched      ak.matmul on [B, M, K] @ [B, K, N] vs torch.bmm (B 1 to 1000), and
               ak.matmul(x, W.t(), bias=b) vs F.linear / torch.addmm (LLM layers, M 16..8192)
  attention    ak.attention vs torch SDPA's flash and cuDNN backends: D {64, 128, 256}, N
               {512 .. 16384} at 16384 tokens per batch, H = 2048 / D, causal and not (FLOPs
               4*B*H*N^2*D, halved when causal); ak.attention_decode (Sq 1, H 32, Hkv 8, D 128)
               KV-cache TB/s vs SDPA and the device copy, contiguous and paged (64-token pages)

Method: CUDA events, warm-up, median of many repeats, random data, inputs
rotated when they fit in L2. Bytes count each input read once and each output written once.
GEMM rows are timed back to back (a GPU sleep hides Python's launch cost; ``launch`` measures
that) in two alternating rounds of ours and the anchor, after one call of each compared for
accuracy (``rel_err``). Prints a table, writes JSON with ``--json PATH`` and a PNG chart with
``--chart PATH`` (norm; gemm, beside it as ``PATH-gemm.png`` under ``all``). Needs torch (the
anchors are torch's).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

__all__ = ["main"]

L2_ROTATE_BYTES = 256 << 20  # rotate through inputs until this many bytes: beats a 50-60 MB L2
FLOAT_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}
MEMORY_BOUND_DEFAULT = ("bf16", "f32")  # elementwise and norm without --dtypes


def _torch() -> Any:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("aotkernels bench: needs a CUDA GPU and torch")
    return torch


def _dtypes(args: argparse.Namespace, known: Sequence[str], default: Sequence[str]) -> list[str]:
    """The dtypes one suite runs: its default without --dtypes, else the given ones it knows
    (``all`` hands every suite the same list)."""
    if args.dtypes is None:
        return list(default)
    return [d for d in args.dtypes.split(",") if d in known]


def time_gpu(fn: Callable[[int], Any], reps: int = 50, warmup: int = 5) -> float:
    """Median milliseconds of ``fn(i)`` over ``reps`` calls, each timed by CUDA events."""
    return float(statistics.median(_gpu_samples(fn, reps, warmup, hide_launch=False)))


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
    add("torch.ops.aotkernels.relu(x)", lambda: torch.ops.aotkernels.relu(x))
    h = torch.randn(4, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    add("aotkernels rms_norm(h, w)", lambda: ak.rms_norm(h, w))
    add("torch.ops.aotkernels.rms_norm(h, w)", lambda: torch.ops.aotkernels.rms_norm(h, w))
    add("F.rms_norm(h, (4096,), w)", lambda: torch.nn.functional.rms_norm(h, (4096,), w))
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
    # Each row against torch's own op of the same kind (relu, or rms_norm for the norm rows).
    base = {r["path"]: r["us_per_call"] for r in rows}
    for r in rows:
        anchor = base["F.rms_norm(h, (4096,), w)" if "rms_norm" in r["path"] else "torch.relu(x)"]
        r["ratio_to_torch_op"] = (r["us_per_call"] / anchor) if r["us_per_call"] else None
    return rows


def _host_us_jax(fn: Callable[[], Any], calls: int, rounds: int = 5) -> float:
    """``host_us`` for JAX: dispatch is asynchronous, so each round ends by waiting for its
    last result (the tiny kernels never fill the queue)."""
    import jax

    wait: Any = jax.block_until_ready  # untyped in jax
    for _ in range(1000):
        r = fn()
    wait(r)
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            r = fn()
        samples.append((time.perf_counter() - t) / calls * 1e6)
        wait(r)
    return statistics.median(samples)


def bench_jax(args: argparse.Namespace) -> list[dict[str, Any]]:
    # JAX would take 75% of the GPU's memory on first use, starving the suites after this one.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
        import jax.numpy as jnp

        gpu = jax.devices("cuda")[0]
    except (ImportError, RuntimeError) as e:
        return [{"path": "jax", "us_per_call": None, "note": f"unavailable: {e}"}]
    import aotkernels as ak

    from . import _jax

    n, hidden = 1024, 4096
    key = jax.random.key(0)
    x = jax.device_put(jax.random.normal(key, (n,), jnp.bfloat16), gpu)
    h = jax.device_put(jax.random.normal(key, (1, hidden), jnp.bfloat16), gpu)
    w = jax.device_put(jnp.ones((hidden,), jnp.bfloat16), gpu)

    def rms_jnp(h: Any, w: Any) -> Any:
        hf = h.astype(jnp.float32)
        r = jax.lax.rsqrt(jnp.mean(hf * hf, axis=-1, keepdims=True) + 1e-6)
        return (hf * r * w.astype(jnp.float32)).astype(h.dtype)

    rows: list[dict[str, Any]] = []

    def add(name: str, fn: Callable[[], Any], anchor: str | None, note: str = "") -> None:
        rows.append({"path": name, "us_per_call": _host_us_jax(fn, args.calls), "anchor": anchor,
                     "note": note})  # fmt: skip

    silu_ours, silu_jnp = jax.jit(ak.silu), jax.jit(jax.nn.silu)
    rms_ours, rms_ref = jax.jit(ak.rms_norm), jax.jit(rms_jnp)
    add("jit(jax.nn.silu)(x)", lambda: silu_jnp(x), None, "1024 bf16")
    add("jit(ak.silu)(x)", lambda: silu_ours(x), "jit(jax.nn.silu)(x)", "one custom call")
    add("jit(rms_norm jnp formula)(h, w)", lambda: rms_ref(h, w), None, "1 x 4096 bf16")
    add("jit(ak.rms_norm)(h, w)", lambda: rms_ours(h, w), "jit(rms_norm jnp formula)(h, w)")
    add("jax.nn.silu(x) eager", lambda: jax.nn.silu(x), None)
    add("ak.silu(x) eager", lambda: ak.silu(x), "jax.nn.silu(x) eager", "FFI custom call")
    available = _jax.available
    _jax.available = lambda: False
    try:
        add("ak.silu(x) eager, DLPack path", lambda: ak.silu(x), "jax.nn.silu(x) eager",
            "launch, then synchronise the stream")  # fmt: skip
    finally:
        _jax.available = available
    by_path = {r["path"]: r["us_per_call"] for r in rows}
    for r in rows:
        base = by_path.get(r.pop("anchor") or "")
        r["ratio_to_anchor"] = r["us_per_call"] / base if base else None
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
    for dtype_name in _dtypes(args, list(FLOAT_DTYPES), MEMORY_BOUND_DEFAULT):
        dtype = getattr(torch, FLOAT_DTYPES[dtype_name])
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
    for dtype_name in _dtypes(args, list(FLOAT_DTYPES), MEMORY_BOUND_DEFAULT):
        dtype = getattr(torch, FLOAT_DTYPES[dtype_name])
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


# fp8 quantization ------------------------------------------------------------------------------

QUANT_SHAPES = ((16384, 4096), (16384, 8192), (256, 4096), (1, 4096))
FP8_E4M3_MAX = 448.0


def _quant_cases(torch: Any, eps: float = 1e-6) -> dict[str, Any]:
    """name -> (ours, torch two-op sequence, bytes moved(rows, cols, itemsize)); every callable
    takes (x, residual, weight, bias, static scale)."""
    import torch.nn.functional as F

    import aotkernels as ak

    e4m3, m = torch.float8_e4m3fn, FP8_E4M3_MAX

    def static(y: Any, s: Any) -> Any:
        return (y.float() / s).clamp(-m, m).to(e4m3)

    def dynamic(y: Any, dims: Any = -1) -> tuple[Any, Any]:
        yf = y.float()
        amax = yf.abs().amax() if dims is None else yf.abs().amax(dims, keepdim=True)
        s = amax.clamp_min(1e-10) / m
        return (yf / s).clamp(-m, m).to(e4m3), s

    def group(y: Any, g: int = 128) -> tuple[Any, Any]:
        r, k = y.shape
        q, s = dynamic(y.view(r, k // g, g))
        return q.view(r, k), s.view(r, k // g)

    def rms(x: Any, w: Any) -> Any:
        return F.rms_norm(x, (x.shape[-1],), w, eps)

    def fused(x: Any, r: Any, w: Any, s: Any) -> Any:
        r.add_(x)
        return static(rms(r, w), s), r

    def silu_mul(x: Any) -> Any:
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]

    def moved(per_elem_in: int, out_ratio: float = 1.0, scales: str = "") -> Any:
        def f(rows: int, cols: int, size: int) -> int:
            extra = {"row": 4 * rows, "group": 4 * rows * (cols // 128)}.get(scales, 0)
            return int(rows * cols * (per_elem_in * size + out_ratio)) + extra

        return f

    fp8 = "float8_e4m3fn"
    return {
        "rms_norm static": (lambda x, r, w, b, s: ak.rms_norm(x, w, eps, out_dtype=fp8, scale=s),
                            lambda x, r, w, b, s: static(rms(x, w), s), moved(1)),
        "rms_norm per-token": (lambda x, r, w, b, s: ak.rms_norm(x, w, eps, out_dtype=fp8),
                               lambda x, r, w, b, s: dynamic(rms(x, w)), moved(1, 1, "row")),
        "fused_add_rms_norm static": (
            lambda x, r, w, b, s: ak.fused_add_rms_norm(x, r, w, eps, out_dtype=fp8, scale=s),
            lambda x, r, w, b, s: fused(x, r, w, s), moved(3)),
        "layer_norm static": (
            lambda x, r, w, b, s: ak.layer_norm(x, w, b, 1e-5, out_dtype=fp8, scale=s),
            lambda x, r, w, b, s: static(F.layer_norm(x, (x.shape[-1],), w, b, 1e-5), s),
            moved(1)),
        "silu_and_mul static": (lambda x, r, w, b, s: ak.silu_and_mul(x, out_dtype=fp8, scale=s),
                                lambda x, r, w, b, s: static(silu_mul(x), s), moved(1, 0.5)),
        "silu_and_mul per-token": (lambda x, r, w, b, s: ak.silu_and_mul(x, out_dtype=fp8),
                                   lambda x, r, w, b, s: dynamic(silu_mul(x)),
                                   moved(1, 0.5, "row")),
        "quantize static": (lambda x, r, w, b, s: ak.quantize_fp8(x, s),
                            lambda x, r, w, b, s: static(x, s), moved(1)),
        "quantize per-token": (lambda x, r, w, b, s: ak.quantize_fp8(x, per_token=True),
                               lambda x, r, w, b, s: dynamic(x), moved(1, 1, "row")),
        "quantize per-tensor": (lambda x, r, w, b, s: ak.quantize_fp8(x),
                                lambda x, r, w, b, s: dynamic(x, None), moved(1)),
        "quantize group128": (lambda x, r, w, b, s: ak.quantize_fp8(x, group_size=128),
                              lambda x, r, w, b, s: group(x), moved(1, 1, "group")),
    }  # fmt: skip


def _time_quant(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> float:
    """Median ms of ``fn(x, residual, weight, bias, scale)``, rotating through the input sets."""
    xs, rs, w, b, scale = inputs
    return time_gpu(lambda i: fn(xs[i % len(xs)], rs[i % len(rs)], w, b, scale))


def bench_quant(args: argparse.Namespace) -> list[dict[str, Any]]:
    torch = _torch()
    cases = _quant_cases(torch)
    ops = [o for o in cases if not args.ops or o.split()[0] in args.ops.split(",")]
    rows: list[dict[str, Any]] = []
    for dtype_name in _dtypes(args, list(FLOAT_DTYPES), ("bf16",)):
        dtype = getattr(torch, FLOAT_DTYPES[dtype_name])
        size = torch.finfo(dtype).bits // 8
        for shape in QUANT_SHAPES[:1] if args.quick else QUANT_SHAPES:
            nbytes = shape[0] * shape[1] * size
            sets = max(1, min(16, L2_ROTATE_BYTES // (3 * nbytes)))
            xs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(sets)]
            rs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(sets)]
            w = torch.rand(shape[1], device="cuda", dtype=dtype) + 0.5
            b = torch.randn(shape[1], device="cuda", dtype=dtype)
            scale = torch.full((1,), 6.0 / FP8_E4M3_MAX, device="cuda")
            dst = torch.empty_like(xs[0])
            copy_tbs = 2 * nbytes / rotating(dst.copy_, xs) / 1e9
            for op in ops:
                ours, seq, nbytes_of = cases[op]
                mv = nbytes_of(shape[0], shape[1], size)

                inputs = (xs, rs, w, b, scale)
                t_ours = _time_quant(ours, inputs)
                t_seq = _time_quant(seq, inputs)
                t_comp = None
                if not args.no_compile:
                    t_comp = _time_quant(torch.compile(seq, dynamic=False), inputs)
                tbs = mv / t_ours / 1e9
                rows.append({
                    "op": op, "dtype": dtype_name, "shape": list(shape), "ours_TBps": tbs,
                    "torch_seq_TBps": mv / t_seq / 1e9,
                    "compile_TBps": mv / t_comp / 1e9 if t_comp else None,
                    "copy_TBps": copy_tbs, "of_copy": tbs / copy_tbs,
                    "vs_torch_seq": t_seq / t_ours,
                    "vs_compile": t_comp / t_ours if t_comp else None,
                })  # fmt: skip
            xs.clear()
            rs.clear()
            torch.cuda.empty_cache()
    return rows


# GEMM ------------------------------------------------------------------------------------------

GEMM_DTYPES = ("bf16", "f16", "fp8", "int8")
GEMM_SQUARE = (1024, 2048, 4096, 8192)
GEMM_LLM_M = (16, 128, 1024, 8192)
GEMM_LLM_NK = ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192))  # Llama-class layers
QUICK_SQUARE = (4096, 8192)
QUICK_LLM_M = (16, 1024)
QUICK_LLM_NK = ((4096, 4096), (14336, 4096))
INT8_MIN_M = 32  # torch._int_mm needs M > 16: the M = 16 rows run at M = 32 for int8
GEMM_MAX_SETS = 64
HIDE_LAUNCH_US = 50  # GPU sleep queued per timed call, so the host enqueues ahead of the GPU
SLEEP_CYCLES_PER_US = 2000  # torch.cuda._sleep counts SM cycles; H100/H200 boost ~1.98 GHz


class GemmShape(NamedTuple):
    """One problem, ``a`` [M, K] @ ``b`` [K, N]; ``kind`` is "square" or "llm"."""

    kind: str
    m: int
    n: int
    k: int

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


class GemmCase(NamedTuple):
    """Ours and the anchor on the same input sets; both map a call index to one call."""

    b_layout: str  # "kmajor": b = W.t() for W [N, K] row-major (nn.Linear); "rowmajor": [K, N]
    scales: str | None  # fp8: "tensor", "rowcol" or "block" (DeepSeek 1x128 / 128x128)
    ours: Callable[[int], Any]
    anchor: Callable[[int], Any]
    anchor_name: str


def gemm_shapes(kinds: Sequence[str], quick: bool) -> list[GemmShape]:
    """Square N^3 problems and LLM layers (every M for each weight [N, K]), fewer with quick."""
    square = QUICK_SQUARE if quick else GEMM_SQUARE
    ms, nks = (QUICK_LLM_M, QUICK_LLM_NK) if quick else (GEMM_LLM_M, GEMM_LLM_NK)
    shapes: list[GemmShape] = []
    if "square" in kinds:
        shapes += [GemmShape("square", s, s, s) for s in square]
    if "llm" in kinds:
        shapes += [GemmShape("llm", m, n, k) for n, k in nks for m in ms]
    return shapes


def gemm_goal(dtype: str, shape: GemmShape) -> float:
    """The ratio over the anchor we aim for (the project's performance goals).

    int8: 8x ``torch._int_mm``; fp8: cuBLAS on every shape; bf16/f16: cuBLAS on large squares
    (>= 4096), 0.9x on LLM shapes and on the small squares (1024, 2048), which are not "large".
    """
    if dtype == "int8":
        return 8.0
    if dtype == "fp8" or (shape.kind == "square" and shape.m >= 4096):
        return 1.0
    return 0.9


def fp8_scale_modes(shape: GemmShape, squares_selected: bool) -> tuple[str, ...]:
    """Per-tensor scales on every shape; per-row/col and block scales once per large size.

    Those run on the squares >= 4096, or on the M = 1024 LLM shapes when no square is selected.
    """
    if (shape.kind == "square" and shape.m >= 4096) or (not squares_selected and shape.m == 1024):
        return ("tensor", "rowcol", "block")
    return ("tensor",)


def _rotate(fn: Callable[..., Any], *sets: list[Any]) -> Callable[[int], Any]:
    """``i -> fn(s0[i], s1[i], ...)``, each index taken modulo its list's length."""
    return lambda i: fn(*(s[i % len(s)] for s in sets))


def _gemm_sets(shape: GemmShape, itemsize: int) -> int:
    """Input sets to rotate through so that together they overflow the L2 (1 when one does)."""
    nbytes = (shape.m + shape.n) * shape.k * itemsize
    return max(1, min(GEMM_MAX_SETS, L2_ROTATE_BYTES // nbytes))


def _float_cases(torch: Any, ak: Any, dtype: str, shape: GemmShape) -> list[GemmCase]:
    """bf16 / f16: ``ak.matmul`` vs ``torch.matmul``, b K-major (``W.t()``) and row-major."""
    tdt = getattr(torch, FLOAT_DTYPES[dtype])
    m, n, k = shape.m, shape.n, shape.k
    sets = _gemm_sets(shape, 2)
    a = [torch.randn(m, k, device="cuda", dtype=tdt) for _ in range(sets)]
    w = [torch.randn(n, k, device="cuda", dtype=tdt) for _ in range(sets)]  # weight [N, K]
    b_k = [x.t() for x in w]
    b_row = [x.t().contiguous() for x in w]  # same values, [K, N] row-major
    return [
        GemmCase("kmajor", None, _rotate(ak.matmul, a, b_k), _rotate(torch.matmul, a, b_k),
                 "torch.matmul"),
        GemmCase("rowmajor", None, _rotate(ak.matmul, a, b_row),
                 _rotate(torch.matmul, a, b_row), "torch.matmul"),
    ]  # fmt: skip


def _fp8_scales(torch: Any, mode: str, shape: GemmShape) -> tuple[Any, Any, Any, Any]:
    """(ours scale_a, ours scale_b, torch scale_a, torch scale_b): the same values.

    block: a 1x128 (M, K/128) and b 128x128 (N/128, K/128) for us; torch._scaled_mm reads
    scale_a (M, K/128) with strides (1, M) ("outer-dim-major") and scale_b (K/128, N/128) with
    strides (1, K/128), i.e. our (N/128, K/128) row-major array transposed.
    """
    m, n, k = shape.m, shape.n, shape.k

    def rand(*size: int) -> Any:
        return torch.rand(*size, device="cuda", dtype=torch.float32) + 0.5  # never zero

    if mode == "tensor":
        sa, sb = rand(1), rand(1)
        return sa, sb, sa, sb
    if mode == "rowcol":
        sa, sb = rand(m, 1), rand(1, n)
        return sa, sb, sa, sb
    kb, nb = math.ceil(k / 128), math.ceil(n / 128)
    sa, sb = rand(kb, m).t(), rand(nb, kb)
    return sa, sb, sa, sb.t()


def _fp8_cases(
    torch: Any, ak: Any, shape: GemmShape, modes: Sequence[str], fast_accum: bool
) -> list[GemmCase]:
    """fp8 e4m3, a row-major, b column-major, out bf16: ``ak.scaled_mm`` vs ``_scaled_mm``."""
    f8, out = torch.float8_e4m3fn, torch.bfloat16
    m, n, k = shape.m, shape.n, shape.k
    sets = _gemm_sets(shape, 1)
    a = [torch.randn(m, k, device="cuda").to(f8) for _ in range(sets)]
    b = [torch.randn(n, k, device="cuda").to(f8).t() for _ in range(sets)]

    def ours(x: Any, y: Any, sa: Any, sb: Any) -> Any:
        return ak.scaled_mm(x, y, sa, sb, out_dtype=out)

    def anchor(x: Any, y: Any, sa: Any, sb: Any) -> Any:
        return torch._scaled_mm(
            x, y, scale_a=sa, scale_b=sb, out_dtype=out, use_fast_accum=fast_accum
        )

    cases = []
    for mode in modes:
        sa, sb, ta, tb = _fp8_scales(torch, mode, shape)
        cases.append(
            GemmCase("kmajor", mode, _rotate(ours, a, b, [sa], [sb]),
                     _rotate(anchor, a, b, [ta], [tb]), "torch._scaled_mm")
        )  # fmt: skip
    return cases


def _int8_cases(torch: Any, ak: Any, shape: GemmShape) -> list[GemmCase]:
    """int8, a row-major, b column-major, exact int32 out: ``ak.scaled_mm`` vs ``_int_mm``."""
    m, n, k = shape.m, shape.n, shape.k
    sets = _gemm_sets(shape, 1)

    def rand(*size: int) -> Any:
        return torch.randint(-128, 128, size, device="cuda", dtype=torch.int8)

    a = [rand(m, k) for _ in range(sets)]
    b = [rand(n, k).t() for _ in range(sets)]

    def ours(x: Any, y: Any) -> Any:
        return ak.scaled_mm(x, y, out_dtype=torch.int32)

    return [GemmCase("kmajor", None, _rotate(ours, a, b), _rotate(torch._int_mm, a, b),
                     "torch._int_mm")]  # fmt: skip


def _gpu_samples(
    fn: Callable[[int], Any], reps: int, warmup: int = 3, *, hide_launch: bool = True
) -> list[float]:
    """Milliseconds of each of ``fn(0..reps-1)``, CUDA events around each call.

    ``hide_launch``: a GPU sleep queued before the timed calls lets the host enqueue all of them
    before the GPU gets there: the events then time back-to-back kernels, not Python's launch
    cost (the GEMM goals are about the kernel; ``bench launch`` measures the host side).
    """
    torch = _torch()
    for i in range(warmup):
        fn(i)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    torch.cuda.synchronize()
    sleep = getattr(torch.cuda, "_sleep", None) if hide_launch else None
    if sleep is not None:
        sleep(reps * HIDE_LAUNCH_US * SLEEP_CYCLES_PER_US)
    for i in range(reps):
        starts[i].record()
        fn(i)
        ends[i].record()
    torch.cuda.synchronize()
    return [float(s.elapsed_time(e)) for s, e in zip(starts, ends, strict=True)]


def _paired_ms(
    ours: Callable[[int], Any], anchor: Callable[[int], Any] | None, reps: int, rounds: int = 2
) -> tuple[float, float | None]:
    """Median ms of ours and of the anchor, measured in alternating rounds (clock drift and
    heating hit both alike)."""
    mine: list[float] = []
    theirs: list[float] = []
    for _ in range(rounds):
        mine += _gpu_samples(ours, reps)
        if anchor is not None:
            theirs += _gpu_samples(anchor, reps)
    return statistics.median(mine), statistics.median(theirs) if theirs else None


def _probe(torch: Any, fn: Callable[[int], Any]) -> tuple[Any, str]:
    """One call on the first input set: (its result, "") or (None, why it failed)."""
    try:
        res = fn(0)
        torch.cuda.synchronize()
        return res, ""
    except Exception as e:  # an anchor this torch / GPU lacks: report it, measure the rest
        lines = str(e).strip().splitlines()
        return None, f"{type(e).__name__}: {lines[0][:160] if lines else ''}"


def _rel_err(ours: Any, ref: Any) -> float:
    """||ours - ref|| / ||ref|| in float64 (0.0 when exact, as int8 should be)."""
    d = ours.double() - ref.double()
    return float(d.norm() / ref.double().norm().clamp_min(1e-30))


def _gemm_row(
    torch: Any, dtype: str, shape: GemmShape, case: GemmCase, reps: int, note: str
) -> dict[str, Any]:
    """Check ours against the anchor once, then time both; one table / JSON row."""
    mine, why = _probe(torch, case.ours)
    ref, why_anchor = _probe(torch, case.anchor)
    notes = [note] if note else []
    notes += [f"ours failed: {why}"] if why else []
    notes += [f"no anchor: {why_anchor}"] if why_anchor else []
    rel = _rel_err(mine, ref) if mine is not None and ref is not None else None
    del mine, ref
    t_ours: float | None = None
    t_anchor: float | None = None
    if not why:
        t_ours, t_anchor = _paired_ms(case.ours, None if why_anchor else case.anchor, reps)
    elif not why_anchor:
        t_anchor = statistics.median(_gpu_samples(case.anchor, reps))
    ratio = t_anchor / t_ours if t_ours and t_anchor else None
    goal = gemm_goal(dtype, shape)
    return {
        "dtype": dtype, "shapes": shape.kind, "M": shape.m, "N": shape.n, "K": shape.k,
        "b": case.b_layout, "scales": case.scales,
        "ours_TFLOPS": shape.flops / t_ours / 1e9 if t_ours else None,
        "anchor_TFLOPS": shape.flops / t_anchor / 1e9 if t_anchor else None,
        "ratio": ratio, "goal": goal, "meets": ratio >= goal if ratio is not None else None,
        "rel_err": rel, "ours_ms": t_ours, "anchor_ms": t_anchor, "anchor": case.anchor_name,
        "note": "; ".join(notes),
    }  # fmt: skip


def _gemm_cases(
    torch: Any, ak: Any, args: argparse.Namespace, dtype: str, shape: GemmShape, squares: bool
) -> list[GemmCase]:
    """The cases of one dtype and shape (inputs allocated here, freed with the cases)."""
    if dtype == "int8":
        return _int8_cases(torch, ak, shape)
    if dtype == "fp8":
        return _fp8_cases(torch, ak, shape, fp8_scale_modes(shape, squares), args.fast_accum)
    return _float_cases(torch, ak, dtype, shape)


def bench_gemm(args: argparse.Namespace) -> list[dict[str, Any]]:
    torch = _torch()
    import aotkernels as ak

    kinds = args.shapes.split(",")
    rows: list[dict[str, Any]] = []
    for dtype in _dtypes(args, GEMM_DTYPES, GEMM_DTYPES):
        for shape in gemm_shapes(kinds, args.quick):
            note = ""
            if dtype == "int8" and shape.m < INT8_MIN_M:
                shape = shape._replace(m=INT8_MIN_M)
                note = f"M={INT8_MIN_M} for int8: torch._int_mm needs M > 16"
            cases = _gemm_cases(torch, ak, args, dtype, shape, "square" in kinds)
            rows += [_gemm_row(torch, dtype, shape, c, args.reps, note) for c in cases]
            cases.clear()
            torch.cuda.empty_cache()
    return rows


# RoPE ------------------------------------------------------------------------------------------

ROPE_TOKENS = (1, 32, 4096, 16384)
ROPE_HEADS = (32, 8, 128)  # Llama-3-8B: q heads, kv heads, head_dim
ROPE_CASES = (("neox", 128), ("neox", 64), ("gptj", 128))  # layout, rot_dim


def _rope_formula(torch: Any, neox: bool) -> Callable[..., Any]:
    """transformers' rotary step (``apply_rotary_pos_emb`` with ``rotate_half``; the GPT-J
    layout with interleaved pairs), out of place, on [tokens, heads, head_dim] q and k."""

    def rotate(x: Any, cos: Any, sin: Any) -> Any:
        rot = cos.shape[-1]
        xr, rest = x[..., :rot], x[..., rot:]
        if neox:
            x1, x2 = xr.chunk(2, dim=-1)
            turned = torch.cat((-x2, x1), dim=-1)
        else:
            turned = torch.stack((-xr[..., 1::2], xr[..., ::2]), dim=-1).flatten(-2)
        return torch.cat((xr * cos + turned * sin, rest), dim=-1)

    def f(q: Any, k: Any, pos: Any, cache: Any) -> tuple[Any, Any]:
        cos, sin = cache[pos].chunk(2, dim=-1)
        if neox:
            cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        else:
            cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
        cos, sin = cos[:, None].to(q.dtype), sin[:, None].to(q.dtype)
        return rotate(q, cos, sin), rotate(k, cos, sin)

    return f


def bench_rope(args: argparse.Namespace) -> list[dict[str, Any]]:
    torch = _torch()
    import aotkernels as ak

    hq, hk, hd = ROPE_HEADS
    rows: list[dict[str, Any]] = []
    for dtype_name in _dtypes(args, list(FLOAT_DTYPES), ("bf16",)):
        dtype = getattr(torch, FLOAT_DTYPES[dtype_name])
        size = torch.finfo(dtype).bits // 8
        for layout, rot in ROPE_CASES:
            neox = layout == "neox"
            inv = 1.0 / 10000 ** (torch.arange(0, rot, 2, device="cuda").float() / rot)
            ang = torch.arange(8192, device="cuda").float()[:, None] * inv
            cache = torch.cat((ang.cos(), ang.sin()), -1)
            formula = _rope_formula(torch, neox)
            compiled = None if args.no_compile else torch.compile(formula, dynamic=False)
            for tokens in ROPE_TOKENS:
                qkv_bytes = tokens * (hq + 2 * hk) * hd * size
                sets = max(1, min(16, L2_ROTATE_BYTES // qkv_bytes))
                bufs = [torch.randn(tokens, (hq + 2 * hk) * hd, device="cuda", dtype=dtype)
                        for _ in range(sets)]  # fmt: skip
                qs = [b[:, : hq * hd].view(tokens, hq, hd) for b in bufs]
                ks = [b[:, hq * hd : (hq + hk) * hd].view(tokens, hk, hd) for b in bufs]
                pos = torch.randint(0, 8192, (tokens,), device="cuda")
                # Bytes: the rotated part of q and k read and written once, cos/sin rows read.
                moved = 2 * tokens * (hq + hk) * rot * size + tokens * rot * 4

                inputs = (qs, ks, [pos], [cache])
                t_ours = time_gpu(_rotate(partial(ak.rope, is_neox=neox), *inputs))
                t_eager = time_gpu(_rotate(formula, *inputs))
                t_comp = time_gpu(_rotate(compiled, *inputs)) if compiled is not None else None
                rows.append({
                    "layout": layout, "rot_dim": rot, "dtype": dtype_name, "tokens": tokens,
                    "ours_us": 1e3 * t_ours, "eager_us": 1e3 * t_eager,
                    "compile_us": 1e3 * t_comp if t_comp else None,
                    "ours_TBps": moved / t_ours / 1e9,
                    "vs_eager": t_eager / t_ours,
                    "vs_compile": t_comp / t_ours if t_comp else None,
                })  # fmt: skip
                bufs.clear()
                torch.cuda.empty_cache()
    return rows


# Batched and bias matmul -----------------------------------------------------------------------

BMM_SHAPES = ((1, 4096, 4096, 4096), (1, 16, 4096, 4096), (8, 2048, 2048, 2048),
              (64, 512, 512, 512), (256, 1024, 1024, 128), (1000, 128, 128, 128),
              (1000, 64, 64, 64), (1000, 16, 64, 64))  # fmt: skip  # (batch, M, N, K)
BIAS_SHAPES = ((16, 4096, 4096), (1024, 4096, 4096), (8192, 4096, 4096), (1024, 14336, 4096))


def _matmul_row(
    torch: Any, kind: str, what: tuple[int, ...], flops: int, ours: Callable[[int], Any],
    anchor: Callable[[int], Any], anchor_name: str, reps: int,
) -> dict[str, Any]:  # fmt: skip
    mine, why = _probe(torch, ours)
    ref, why_anchor = _probe(torch, anchor)
    rel = _rel_err(mine, ref) if mine is not None and ref is not None else None
    del mine, ref
    t_ours, t_anchor = (None, None)
    if not why:
        t_ours, t_anchor = _paired_ms(ours, None if why_anchor else anchor, reps)
    return {
        "case": kind, "shape": "x".join(map(str, what)),
        "ours_TFLOPS": flops / t_ours / 1e9 if t_ours else None,
        "anchor_TFLOPS": flops / t_anchor / 1e9 if t_anchor else None,
        "ratio": t_anchor / t_ours if t_ours and t_anchor else None,
        "rel_err": rel, "ours_ms": t_ours, "anchor_ms": t_anchor, "anchor": anchor_name,
        "note": "; ".join(n for n in (why and f"ours failed: {why}",
                                      why_anchor and f"no anchor: {why_anchor}") if n),
    }  # fmt: skip


def bench_batched(args: argparse.Namespace) -> list[dict[str, Any]]:
    torch = _torch()
    import torch.nn.functional as F

    import aotkernels as ak

    dt = torch.bfloat16
    rows: list[dict[str, Any]] = []
    for bsz, m, n, k in BMM_SHAPES:
        sets = max(1, min(GEMM_MAX_SETS, L2_ROTATE_BYTES // (bsz * (m + n) * k * 2)))
        a = [torch.randn(bsz, m, k, device="cuda", dtype=dt) for _ in range(sets)]
        b = [torch.randn(bsz, k, n, device="cuda", dtype=dt) for _ in range(sets)]
        rows.append(_matmul_row(torch, "bmm", (bsz, m, n, k), 2 * bsz * m * n * k,
                                _rotate(ak.matmul, a, b), _rotate(torch.bmm, a, b), "torch.bmm",
                                args.reps))  # fmt: skip
        a.clear()
        b.clear()
        torch.cuda.empty_cache()
    for m, n, k in BIAS_SHAPES:
        sets = max(1, min(GEMM_MAX_SETS, L2_ROTATE_BYTES // ((m + n) * k * 2)))
        x = [torch.randn(m, k, device="cuda", dtype=dt) for _ in range(sets)]
        w = [torch.randn(n, k, device="cuda", dtype=dt) for _ in range(sets)]
        bias = [torch.randn(n, device="cuda", dtype=dt)]
        ours = _rotate(lambda xi, wi, bi: ak.matmul(xi, wi.t(), bias=bi), x, w, bias)
        for name, anchor in (
            ("F.linear", _rotate(F.linear, x, w, bias)),
            ("torch.addmm", _rotate(lambda xi, wi, bi: torch.addmm(bi, xi, wi.t()), x, w, bias)),
        ):
            rows.append(_matmul_row(torch, "bias", (m, n, k), 2 * m * n * k, ours, anchor, name,
                                    args.reps))  # fmt: skip
        x.clear()
        w.clear()
        torch.cuda.empty_cache()
    return rows


# --- attention --------------------------------------------------------------------------------
ATTN_DTYPES = ("bf16", "f16")
ATTN_TOKENS = 16384  # tokens per batch: B = 16384 / N, as the FlashAttention papers
ATTN_HIDDEN = 2048  # H = 2048 / D


def _attn_anchors(torch: Any) -> dict[str, Any]:
    """torch SDPA pinned to one backend each: flash (FlashAttention-2) and cuDNN."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return {"flash": (sdpa_kernel, SDPBackend.FLASH_ATTENTION),
            "cudnn": (sdpa_kernel, SDPBackend.CUDNN_ATTENTION)}  # fmt: skip


def _sdpa(torch: Any, backend: Any, q: Any, k: Any, v: Any, causal: bool) -> Callable[[int], Any]:
    ctx, which = backend
    F = torch.nn.functional
    # SDPA takes [B, H, S, D]: the transposed views of our [B, S, H, D] inputs.
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def run(i: int) -> Any:
        with ctx(which):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)

    return run


def _attn_fwd_row(
    torch: Any, ak: Any, dtype: str, d: int, n: int, causal: bool, reps: int
) -> dict[str, Any]:
    dt = getattr(torch, FLOAT_DTYPES[dtype])
    b, h = max(1, ATTN_TOKENS // n), ATTN_HIDDEN // d
    q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=dt) for _ in range(3))
    flops = 4 * b * h * n * n * d / (2 if causal else 1)

    def ours(i: int) -> Any:
        return ak.attention(q, k, v, causal=causal)

    row: dict[str, Any] = {"dtype": dtype, "D": d, "N": n, "B": b, "H": h, "causal": causal}
    mine, why = _probe(torch, ours)
    notes = [f"ours failed: {why}"] if why else []
    t_ours = None if why else statistics.median(_gpu_samples(ours, reps) + _gpu_samples(ours, reps))
    row["ours_TFLOPS"] = flops / t_ours / 1e9 if t_ours else None
    for name, backend in _attn_anchors(torch).items():
        fn = _sdpa(torch, backend, q, k, v, causal)
        ref, why_a = _probe(torch, fn)
        if why_a:
            notes.append(f"no {name}: {why_a}")
            row[f"{name}_TFLOPS"] = row[f"vs_{name}"] = None
            continue
        if name == "flash" and mine is not None:
            row["rel_err"] = _rel_err(mine, ref)
        t = statistics.median(_gpu_samples(fn, reps) + _gpu_samples(fn, reps))
        row[f"{name}_TFLOPS"] = flops / t / 1e9
        row[f"vs_{name}"] = t / t_ours if t_ours else None
    row.setdefault("rel_err", None)
    row["note"] = "; ".join(notes)
    return row


def _attn_decode_row(
    torch: Any, ak: Any, b: int, ctx: int, page: int | None, reps: int
) -> dict[str, Any]:
    """One decode step (Sq = 1, H = 32, Hkv = 8, D = 128, bf16) over a full cache of ``ctx``."""
    h, hkv, d = 32, 8, 128
    dt = torch.bfloat16
    q = torch.randn(b, 1, h, d, device="cuda", dtype=dt)
    k, v = (torch.randn(b, ctx, hkv, d, device="cuda", dtype=dt) for _ in range(2))
    lens = torch.full((b,), ctx, device="cuda", dtype=torch.int32)
    if page is None:
        kc, vc, bt = k, v, None
    else:  # the same cache as pages in a shuffled order
        per = ctx // page
        perm = torch.randperm(b * per, device="cuda")
        kc = torch.empty(b * per, page, hkv, d, device="cuda", dtype=dt)
        vc = torch.empty_like(kc)
        kc[perm] = k.reshape(b * per, page, hkv, d)
        vc[perm] = v.reshape(b * per, page, hkv, d)
        bt = perm.reshape(b, per).to(torch.int32)
    nbytes = 2 * k.numel() * k.element_size()

    def ours(i: int) -> Any:
        return ak.attention_decode(q, kc, vc, lens, bt)

    def sdpa(i: int) -> Any:
        F = torch.nn.functional
        return F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True
        )

    flat = k.reshape(-1)
    dst = torch.empty_like(flat)
    t_copy = statistics.median(_gpu_samples(lambda i: dst.copy_(flat), reps))
    mine, why = _probe(torch, ours)
    ref, why_a = _probe(torch, sdpa)
    t_ours = None if why else statistics.median(_gpu_samples(ours, reps) + _gpu_samples(ours, reps))
    t_sdpa = None if why_a else statistics.median(_gpu_samples(sdpa, reps))
    notes = [f"ours failed: {why}"] if why else []
    notes += [f"no sdpa: {why_a}"] if why_a else []
    rel = _rel_err(mine, ref.transpose(1, 2)) if mine is not None and ref is not None else None
    copy_bw = 2 * flat.numel() * flat.element_size() / t_copy / 1e9
    ours_bw = nbytes / t_ours / 1e9 if t_ours else None
    return {
        "B": b, "context": ctx, "paged": page or 0,
        "ours_TBps": ours_bw, "sdpa_TBps": nbytes / t_sdpa / 1e9 if t_sdpa else None,
        "copy_TBps": copy_bw, "vs_sdpa": t_sdpa / t_ours if t_sdpa and t_ours else None,
        "of_copy": ours_bw / copy_bw if ours_bw else None,
        "rel_err": rel,
        "ours_us": t_ours * 1e3 if t_ours else None, "note": "; ".join(notes),
    }  # fmt: skip


def _attn_varlen_row(torch: Any, ak: Any, causal: bool, reps: int) -> dict[str, Any]:
    """A mixed batch (lengths 97 .. 4001, 16 sequences, H 16, D 128, bf16) packed for ours,
    padded to the longest for SDPA's flash backend (what a framework without varlen does)."""
    lens = [97, 4001, 512, 1500, 33, 2048, 777, 3000, 256, 1024, 64, 2500, 128, 3500, 900, 1]
    h, d, dt = 16, 128, torch.bfloat16
    total, longest = sum(lens), max(lens)
    q, k, v = (torch.randn(total, h, d, device="cuda", dtype=dt) for _ in range(3))
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], device="cuda", dtype=torch.int32)
    pad = torch.zeros(len(lens), longest, h, d, device="cuda", dtype=dt)
    for i, n in enumerate(lens):
        pad[i, :n] = q[cu[i] : cu[i] + n]
    flops = sum(4 * n * n * h * d for n in lens) / (2 if causal else 1)

    def ours(i: int) -> Any:
        return ak.attention_varlen(q, k, v, cu, cu, longest, longest, causal=causal)

    flash = _sdpa(torch, _attn_anchors(torch)["flash"], pad, pad, pad, causal)
    _, why = _probe(torch, ours)
    _, why_a = _probe(torch, flash)
    t_ours = None if why else statistics.median(_gpu_samples(ours, reps))
    t_pad = None if why_a else statistics.median(_gpu_samples(flash, reps))
    return {
        "causal": causal, "tokens": total, "longest": longest,
        "ours_TFLOPS": flops / t_ours / 1e9 if t_ours else None,
        "padded_flash_TFLOPS": flops / t_pad / 1e9 if t_pad else None,
        "vs_padded_flash": t_pad / t_ours if t_pad and t_ours else None,
        "note": "; ".join(w for w in (why, why_a) if w),
    }  # fmt: skip


def bench_attention(args: argparse.Namespace) -> tuple[list[dict[str, Any]], ...]:
    """Forward TFLOP/s vs SDPA flash and cuDNN; decode KV bytes/s vs SDPA and copy; a varlen
    batch vs padded SDPA flash."""
    torch = _torch()
    import aotkernels as ak

    reps = min(args.reps, 20)
    seqs = (1024, 4096, 16384) if args.quick else (512, 1024, 2048, 4096, 8192, 16384)
    fwd = []
    for dtype in _dtypes(args, ATTN_DTYPES, ("bf16",)):
        for d in (64, 128, 256):
            for n in seqs:
                for causal in (False, True):
                    fwd.append(_attn_fwd_row(torch, ak, dtype, d, n, causal, reps))
                    torch.cuda.empty_cache()
    dec = []
    for b, ctx in ((1, 1024), (1, 16384), (1, 131072), (8, 8192), (8, 131072), (64, 1024),
                   (64, 8192), (64, 32768)):  # fmt: skip
        for page in (None, 64):
            dec.append(_attn_decode_row(torch, ak, b, ctx, page, reps))
            torch.cuda.empty_cache()
    var = [_attn_varlen_row(torch, ak, causal, reps) for causal in (False, True)]
    return fwd, dec, var


def gemm_chart(rows: list[dict[str, Any]], path: str, title: str) -> None:
    """Our ratio over the anchor per shape, one panel per dtype, goals marked (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [[r for r in rows if r["dtype"] == d] for d in dict.fromkeys(r["dtype"] for r in rows)]
    fig, axes = plt.subplots(
        len(groups), 1, squeeze=False, figsize=(10, 0.26 * len(rows) + 1.1 * len(groups) + 0.5),
        gridspec_kw={"height_ratios": [len(g) for g in groups]},
    )  # fmt: skip
    for ax, group in zip(axes[:, 0], groups, strict=True):
        labels = [
            f"{r['M']}x{r['N']}x{r['K']} {r['b']}" + (f" {r['scales']}" if r["scales"] else "")
            for r in group
        ]
        colors = [
            "tab:gray" if r["meets"] is None else "tab:green" if r["meets"] else "tab:red"
            for r in group
        ]
        ys = range(len(group))  # positions, not labels: a square can repeat an LLM shape
        bars = ax.barh(ys, [r["ratio"] or 0.0 for r in group], color=colors)
        ax.bar_label(bars, [f"{r['ratio']:.2f}" if r["ratio"] else "no anchor" for r in group],
                     fontsize=6, padding=2)  # fmt: skip
        ax.scatter([r["goal"] for r in group], ys, marker="|", s=120, color="black")
        ax.set_yticks(ys, labels)
        ax.axvline(1.0, color="black", linewidth=0.6)
        ax.set_title(f"{group[0]['dtype']} vs {group[0]['anchor']}", fontsize=9, loc="left")
        ax.tick_params(axis="y", labelsize=7)
        ax.invert_yaxis()
    axes[-1, 0].set_xlabel("ours / anchor throughput (bar; | = goal; red misses it)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _gemm_chart_path(args: argparse.Namespace) -> str:
    """--chart as given for ``bench gemm``; beside the norm chart (``-gemm`` suffix) for all."""
    if args.what == "gemm":
        return str(args.chart)
    root, ext = os.path.splitext(args.chart)
    return f"{root}-gemm{ext or '.png'}"


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


def _cell(v: Any) -> str:
    """A table cell: floats to 3 decimals, tiny ones (errors) in exponent form."""
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.3f}" if v == 0 or abs(v) >= 0.01 else f"{v:.2e}"
    return str(v)


def _print(rows: list[dict[str, Any]], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    if not rows:
        return
    t = Table(title=title, title_justify="left")
    for k in rows[0]:
        t.add_column(k)
    for r in rows:
        t.add_row(*(_cell(v) for v in r.values()))
    Console(width=200).print(t)


SUITES = (
    "launch",
    "elementwise",
    "norm",
    "quant",
    "gemm",
    "attention",
    "rope",
    "batched",
    "compiled",
    "backward",
    "jax",
    "all",
)
SUITE_DTYPES = {"elementwise": tuple(FLOAT_DTYPES), "norm": tuple(FLOAT_DTYPES),
                "quant": tuple(FLOAT_DTYPES),
                "gemm": GEMM_DTYPES, "attention": ATTN_DTYPES, "compiled": ("bf16",),
                "backward": ("bf16",), "rope": tuple(FLOAT_DTYPES), "batched": ()}  # fmt: skip


def _check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject --dtypes no chosen suite runs and --shapes gemm does not know (before torch)."""
    if args.dtypes is not None and args.what not in ("launch", "jax"):
        runs = SUITE_DTYPES if args.what == "all" else {args.what: SUITE_DTYPES[args.what]}
        known = {d for ds in runs.values() for d in ds}
        unknown = sorted(set(args.dtypes.split(",")) - known)
        if unknown:
            ap.error(f"--dtypes: {unknown} not run by {args.what} (known: {sorted(known)})")
    bad = sorted(set(args.shapes.split(",")) - {"square", "llm"})
    if bad:
        ap.error(f"--shapes: unknown {bad} (known: square, llm)")


def _try_chart(rows: list[dict[str, Any]], path: str, title: str) -> None:
    """gemm_chart when matplotlib is importable; otherwise say so and go on."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"aotkernels bench: no matplotlib, no chart {path}", file=sys.stderr)
        return
    gemm_chart(rows, path, title)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="aotkernels bench", description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=SUITES)
    ap.add_argument("--chart", help="write a PNG chart (norm, gemm) to this file")
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--calls", type=int, default=20000, help="calls per host-cost round")
    ap.add_argument("--ops", help="comma-separated ops (elementwise)")
    ap.add_argument(
        "--dtypes",
        help="comma-separated: bf16,f16,f32 (elementwise, norm; default bf16,f32; quant, rope: "
        "default bf16), "
        "bf16,f16,fp8,int8 (gemm; default all four)",
    )
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile anchor")
    ap.add_argument(
        "--shapes", default="square,llm", help="gemm shape sets: square, llm (default both)"
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="gemm: squares 4096, 8192 and M {16, 1024} x (N, K) {(4096, 4096), (14336, 4096)}; "
        "quant: 16384 x 4096 only",
    )
    ap.add_argument("--reps", type=int, default=50, help="gemm: timed calls per round (2 rounds)")
    ap.add_argument(
        "--fast-accum", action="store_true", help="gemm: use_fast_accum=True for _scaled_mm"
    )
    args = ap.parse_args(argv)
    _check_args(ap, args)
    torch = _torch()
    if args.ops:  # each suite runs the ops it knows; a name no suite knows is a typo
        known = {*_elementwise_cases(torch), *_norm_cases(torch)}
        known |= {name.split()[0] for name in _quant_cases(torch)}
        unknown = sorted(set(args.ops.split(",")) - known)
        if unknown:
            ap.error(f"--ops: unknown {unknown} (known: {sorted(known)})")
    results: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    if args.what in ("launch", "all"):
        results["launch"] = bench_launch(args)
        _print(results["launch"], "host cost per call (µs)")
    if args.what in ("jax", "all"):
        results["jax"] = bench_jax(args)
        _print(results["jax"], "host cost per call under JAX (µs)")
    if args.what in ("elementwise", "all"):
        results["elementwise"] = bench_elementwise(args)
        _print(results["elementwise"], "elementwise bandwidth (TB/s) and ratios")
    if args.what in ("norm", "all"):
        results["norm"] = bench_norm(args)
        _print(results["norm"], "norm / softmax bandwidth (TB/s) and ratios")
        if args.chart:
            chart(results["norm"], args.chart, f"norm and softmax on {results['device']}")
    if args.what in ("quant", "all"):
        results["quant"] = bench_quant(args)
        _print(results["quant"], "fp8-quantizing ops: bandwidth (TB/s) and ratios")
    if args.what in ("gemm", "all"):
        results["gemm_method"] = {
            "reps_per_round": args.reps, "rounds": 2, "fp8_use_fast_accum": args.fast_accum,
            "flops": "2*M*N*K", "int8_M": f"{INT8_MIN_M} where the shape set says 16",
        }  # fmt: skip
        results["gemm"] = bench_gemm(args)
        _print(results["gemm"], "GEMM TFLOP/s (int8: TOP/s), ours / anchor ratio and goal")
        if args.chart:
            _try_chart(results["gemm"], _gemm_chart_path(args), f"GEMM on {results['device']}")
    if args.what in ("rope", "all"):
        results["rope"] = bench_rope(args)
        _print(results["rope"], "RoPE (q and k in place) vs the transformers formula")
    if args.what in ("batched", "all"):
        results["batched"] = bench_batched(args)
        _print(results["batched"], "batched matmul vs torch.bmm, bias matmul vs F.linear / addmm")
    if args.what in ("attention", "all"):
        fwd, dec, var = bench_attention(args)
        results.update(attention=fwd, attention_decode=dec, attention_varlen=var)
        _print(fwd, "attention forward TFLOP/s vs SDPA flash / cuDNN")
        _print(dec, "attention decode KV-cache TB/s vs SDPA and copy")
        _print(var, "attention_varlen (useful FLOPs) vs SDPA flash on the padded batch")
    if args.what in ("compiled", "backward"):  # not in "all": minutes of compiling
        from . import bench_frontends

        results[args.what] = getattr(bench_frontends, f"bench_{args.what}")(args)
        title = {"compiled": "Llama decoder layer under torch.compile (ms per layer)",
                 "backward": "backward bandwidth (TB/s) and ratios"}[args.what]  # fmt: skip
        _print(results[args.what], title)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
