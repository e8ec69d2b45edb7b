#!/usr/bin/env python3
"""Where the host time of one ``ak.relu(x, out=y)`` call goes (GPU machine, torch installed).

Times each piece of the torch fast path in isolation (microseconds per call, median of rounds)
so that a change to the hot path can be predicted and checked. Not a test: a measuring tool.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

import aotkernels as ak
from aotkernels import arrays
from aotkernels.ops import _common


def us(fn: Callable[[], object], calls: int = 20000, rounds: int = 5) -> float:
    for _ in range(500):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


def main() -> None:
    x = torch.randn(1024, device="cuda")
    y = torch.empty_like(x)
    for _ in range(2):  # the first call also creates the torch adapter; the second caches
        ak.relu(x, out=y)
        ak.relu(x)
    key = ("ak_relu_", (x.dtype, x.shape, x.stride(), x.get_device()),
           (y.dtype, y.shape, y.stride(), y.get_device()))
    plan = _common._PLANS[key][0]
    xp, yp = x.data_ptr(), y.data_ptr()
    rows = {
        "plan(stream, ptrs) [C++ + cuLaunchKernel]": us(lambda: plan(0, yp, xp)),
        "layout key of x (dtype, shape, stride, device)":
            us(lambda: (x.dtype, x.shape, x.stride(), x.get_device())),
        "x.data_ptr()": us(lambda: x.data_ptr()),
        "x.is_contiguous()": us(lambda: x.is_contiguous()),
        "torch current raw stream": us(lambda: arrays.torch_stream(0)),
        "x.new_empty(shape)": us(lambda: x.new_empty(x.shape)),
        "torch.empty_like(x)": us(lambda: torch.empty_like(x)),
        "ak.relu(x, out=y)": us(lambda: ak.relu(x, out=y)),
        "ak.relu(x)": us(lambda: ak.relu(x)),
        "torch.relu(x)": us(lambda: torch.relu(x)),
        "torch.relu(x, out=y) via torch.clamp_min": us(lambda: torch.clamp_min(x, 0, out=y)),
    }
    for k, v in rows.items():
        print(f"{v:8.3f} us  {k}")


if __name__ == "__main__":
    main()
