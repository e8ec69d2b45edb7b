"""``bench launch``: the host cost of one call, ours (with and without out=) beside torch's own
op, a CuPy RawKernel and cuda.core ``launch`` of an equivalent kernel (µs per call)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .common import Row
from .timing import cuda_torch, host_us

TITLE = "host cost per call (µs)"

_RELU_SRC = r"""
extern "C" __global__ void relu_f32(const float* x, float* y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] < 0.f ? 0.f : x[i];
}
"""


def run(args: argparse.Namespace) -> list[Row]:
    torch = cuda_torch()
    import aotkernels as ak

    n = 1024
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    rows: list[Row] = []

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
