"""How the benchmarks (and tools/launch_breakdown.py) measure.

GPU time: CUDA events around each call, after a warm-up; the median of many calls. Inputs are
rotated through several sets when one fits in the L2, so that each call reads from memory.
Host time: microseconds per call over many calls of a tiny kernel (the queue never fills), the
median of a few rounds.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

L2_ROTATE_BYTES = 256 << 20  # rotate through inputs until this many bytes: beats a 50-60 MB L2
HIDE_LAUNCH_US = 50  # GPU sleep queued per timed call, so the host enqueues ahead of the GPU
SLEEP_CYCLES_PER_US = 2000  # torch.cuda._sleep counts SM cycles; H100/H200 boost ~1.98 GHz


def cuda_torch() -> Any:
    """torch, when it sees a CUDA GPU (the anchors and the timing are torch's)."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("aotkernels bench: needs a CUDA GPU and torch")
    return torch


def input_sets(nbytes: int, most: int = 16) -> int:
    """How many input sets of ``nbytes`` to rotate through so that together they overflow the
    L2 (1 when one set does), at most ``most``."""
    return max(1, min(most, L2_ROTATE_BYTES // max(1, nbytes)))


def rotate(fn: Callable[..., Any], *sets: list[Any]) -> Callable[[int], Any]:
    """``i -> fn(s0[i], s1[i], ...)``, each index taken modulo its list's length."""
    return lambda i: fn(*(s[i % len(s)] for s in sets))


def gpu_samples(
    fn: Callable[[int], Any], reps: int, warmup: int = 3, *, hide_launch: bool = True
) -> list[float]:
    """Milliseconds of each of ``fn(0..reps-1)``, CUDA events around each call.

    ``hide_launch``: a GPU sleep queued before the timed calls lets the host enqueue all of them
    before the GPU gets there: the events then time back-to-back kernels, not Python's launch
    cost (the GEMM goals are about the kernel; ``bench launch`` measures the host side).
    """
    torch = cuda_torch()
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


def median_ms(fn: Callable[[int], Any], reps: int, rounds: int = 1) -> float:
    """Median ms of ``fn(i)`` over ``rounds`` rounds of ``reps`` back-to-back calls."""
    return statistics.median(s for _ in range(rounds) for s in gpu_samples(fn, reps))


def time_gpu(fn: Callable[[int], Any], reps: int = 50, warmup: int = 5) -> float:
    """Median milliseconds of ``fn(i)`` over ``reps`` calls, each timed on its own (the host
    launches each call as the previous one ends)."""
    return float(statistics.median(gpu_samples(fn, reps, warmup, hide_launch=False)))


def rotating(fn: Callable[..., Any], *sets: list[Any]) -> float:
    """``time_gpu`` of ``fn`` over calls that rotate through the input ``sets`` (defeats the
    L2)."""
    return time_gpu(rotate(fn, *sets))


def paired_ms(
    ours: Callable[[int], Any], anchor: Callable[[int], Any] | None, reps: int, rounds: int = 2
) -> tuple[float, float | None]:
    """Median ms of ours and of the anchor, measured in alternating rounds (clock drift and
    heating hit both alike)."""
    mine: list[float] = []
    theirs: list[float] = []
    for _ in range(rounds):
        mine += gpu_samples(ours, reps)
        if anchor is not None:
            theirs += gpu_samples(anchor, reps)
    return statistics.median(mine), statistics.median(theirs) if theirs else None


def probe(fn: Callable[[int], Any]) -> tuple[Any, str]:
    """One call on the first input set: (its result, "") or (None, why it failed)."""
    torch = cuda_torch()
    try:
        res = fn(0)
        torch.cuda.synchronize()
        return res, ""
    except Exception as e:  # an anchor this torch / GPU lacks: report it, measure the rest
        lines = str(e).strip().splitlines()
        return None, f"{type(e).__name__}: {lines[0][:160] if lines else ''}"


def _torch_sync(_: Any) -> None:
    cuda_torch().cuda.synchronize()


def host_us(
    fn: Callable[[], Any],
    calls: int = 20000,
    rounds: int = 5,
    warmup: int = 1000,
    wait: Callable[[Any], Any] = _torch_sync,
) -> float:
    """Median over rounds of host microseconds per call of ``fn``; ``wait(last result)`` ends
    each round (torch: a device synchronisation; JAX: ``block_until_ready``, its dispatch being
    asynchronous)."""
    res = None
    for _ in range(warmup):
        res = fn()
    wait(res)
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            res = fn()
        samples.append((time.perf_counter() - t) / calls * 1e6)
        wait(res)
    return statistics.median(samples)
