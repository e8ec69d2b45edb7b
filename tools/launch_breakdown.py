#!/usr/bin/env python3
"""Where the host time of one ``ak.relu`` call goes, and how the grid cap moves bandwidth.

GPU machine with torch. Times each piece of the torch fast path in isolation (microseconds per
call, median of rounds) so a change to the hot path can be predicted and checked, then sweeps
``_elementwise.BLOCKS_PER_SM`` on large bf16 tensors. A measuring tool, not a test.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

import aotkernels as ak
from aotkernels import _core, arrays, device, loader
from aotkernels.bench.timing import host_us, time_gpu
from aotkernels.ops import _elementwise, _op


def host_costs() -> None:
    x = torch.randn(1024, device="cuda")
    y = torch.empty_like(x)
    for _ in range(2):  # the first call also creates the torch adapter; the second caches
        ak.relu(x, out=y)
        ak.relu(x)
    # The cached launch of ak.relu(x, out=y): the key's last element is out's layout.
    fast = next(f for k, f in _op._PLANS.items() if k[0].name == "relu" and k[-1])
    plan = fast.launches[0][0]
    xp, yp = x.data_ptr(), y.data_ptr()
    fam = loader.family_on("activation", 0)
    cu = device.cuda_driver()
    _, kern = cu.cuLibraryGetKernel(fam.library, b"ak_relu_f32")
    params = fam.params.pack(yp, xp, 1, 1024, 1024, 1024)
    by_kernel = _core.PreparedLaunch(
        "k", int(kern), fam.device.context, [1, 1, 1], [256, 1, 1], 0, params, fam.ptr_offsets
    )
    rows = {
        "plan(stream, ptrs) via CUfunction": host_us(lambda: plan(0, yp, xp)),
        "same plan via context-independent CUkernel": host_us(lambda: by_kernel(0, yp, xp)),
        "layout key of x (dtype, shape, stride, device)": host_us(
            lambda: (x.dtype, x.shape, x.stride(), x.get_device())
        ),
        "x.data_ptr()": host_us(lambda: x.data_ptr()),
        "torch current raw stream": host_us(lambda: arrays.torch_stream(0)),
        "x.new_empty(shape)": host_us(lambda: x.new_empty(x.shape)),
        "torch.empty_like(x)": host_us(lambda: torch.empty_like(x)),
        "torch.empty(shape, dtype=, device=)": host_us(
            lambda: torch.empty((1024,), dtype=torch.float32, device="cuda")
        ),
        "ak.relu(x, out=y)": host_us(lambda: ak.relu(x, out=y)),
        "ak.relu(x)": host_us(lambda: ak.relu(x)),
        "torch.relu(x)": host_us(lambda: torch.relu(x)),
        "torch.clamp_min(x, 0, out=y)": host_us(lambda: torch.clamp_min(x, 0, out=y)),
    }
    for k, v in rows.items():
        print(f"{v:8.3f} us  {k}")


def _call(fn: Callable[[torch.Tensor], object], x: torch.Tensor, _: int) -> object:
    return fn(x)


def grid_sweep() -> None:
    x = torch.randn(16384, 8192, device="cuda", dtype=torch.bfloat16)
    nbytes = 2 * x.numel() * 2
    copy = nbytes / time_gpu(lambda i: torch.empty_like(x).copy_(x)) / 1e9
    print(f"copy {copy:.3f} TB/s")
    for bps in (4, 8, 16, 32, 64, 128):
        _elementwise.BLOCKS_PER_SM = bps
        _elementwise.elementwise_config.cache_clear()
        _op._PLANS.clear()
        cells = []
        for name, fn in (("relu", ak.relu), ("silu", ak.silu), ("silu_and_mul", ak.silu_and_mul)):
            moved = nbytes if name != "silu_and_mul" else nbytes * 3 // 4
            t = time_gpu(partial(_call, fn, x))
            cells.append(f"{name} {moved / t / 1e9:.3f}")
        print(f"BLOCKS_PER_SM={bps:4d}: " + "  ".join(cells) + " TB/s")


if __name__ == "__main__":
    host_costs()
    grid_sweep()
