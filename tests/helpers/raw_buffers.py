"""Device buffers through aotkernels and cuda-python alone (no torch), for subprocess tests that
must not depend on a framework: compute-sanitizer runs and CUDA_FORCE_PTX_JIT=1 (torch's own
kernels do not load under forced PTX JIT)."""

from __future__ import annotations

from typing import Any

import numpy as np
from cuda.bindings import driver as cu

from aotkernels import _core, device
from helpers.fake_dlpack import FakeCudaArray

_keep: list[Any] = []


def _ok(result: tuple[Any, ...]) -> None:
    assert result[0] == cu.CUresult.CUDA_SUCCESS, result[0]


def device_copy(host: np.ndarray, pad: int = 0) -> int:
    """Copy a float32 host array into a fresh device buffer (+pad elements); its address."""
    device.cuda_driver()
    ctx = device.device_info(0).context
    _ok(cu.cuCtxSetCurrent(cu.CUcontext(ctx)))  # no framework here has made one current
    cap = _core.empty(ctx, 0, [host.size + pad], 2, 32)
    _keep.append(cap)
    ptr = int(_core.dlpack_info(cap)[0])
    data = np.ascontiguousarray(host, dtype=np.float32)
    filled = np.concatenate([data.ravel(), np.full(pad, np.nan, np.float32)])
    _ok(cu.cuMemcpyHtoD(ptr, filled.tobytes(), filled.nbytes))
    return ptr


def to_host(ptr: int, n: int) -> np.ndarray:
    out = np.empty(n, np.float32)
    _ok(cu.cuCtxSynchronize())
    _ok(cu.cuMemcpyDtoH(out, ptr, out.nbytes))
    return out


def view(ptr: int, shape: tuple[int, ...], strides: tuple[int, ...] | None = None) -> Any:
    return FakeCudaArray(shape, "float32", strides, 0, ptr)
