"""Small shapes of every activation/gated op with no framework but aotkernels itself, for
compute-sanitizer (memcheck, racecheck, initcheck, synccheck). Inputs are filled from the host
into aotkernels' own device buffers and passed as DLPack views, misaligned and strided ones too.
"""

import struct
import sys
from pathlib import Path

from cuda.bindings import driver as cu

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aotkernels as ak  # noqa: E402
from aotkernels import _core, device  # noqa: E402
from helpers.fake_dlpack import FakeCudaArray  # noqa: E402

device.cuda_driver()
ctx = device.device_info(0).context
keep = []


def buffer(n: int) -> int:
    """A device buffer of n float32 values, every one initialised from the host."""
    buf = _core.empty(ctx, 0, [n], 2, 32)
    keep.append(buf)
    ptr = _core.dlpack_info(buf.__dlpack__())[0]
    data = struct.pack(f"{n}f", *[((i * 37) % 23 - 11) / 3.0 for i in range(n)])
    (err,) = cu.cuMemcpyHtoD(ptr, data, len(data))
    assert err == cu.CUresult.CUDA_SUCCESS, err
    return ptr


ops = [ak.relu, ak.silu, ak.sigmoid, ak.gelu, lambda t, **k: ak.gelu(t, approximate="tanh", **k)]
for n in (1, 17, 4097):
    src, dst = buffer(n + 8), buffer(n + 8)
    for op in ops:
        for off in (0, 1, 3):
            op(FakeCudaArray((n,), ptr=src + 4 * off), out=FakeCudaArray((n,), ptr=dst + 4 * off))
for rows, d in ((3, 46), (5, 111), (2, 1792)):
    src, dst = buffer(rows * (2 * d + 4)), buffer(rows * d + 4)
    for op in (ak.silu_and_mul, ak.gelu_and_mul):
        for off in (0, 1):
            x = FakeCudaArray((rows, 2 * d), strides=(2 * d + 4, 1), ptr=src + 4 * off)
            op(x, out=FakeCudaArray((rows, d), ptr=dst + 4 * off))
(err,) = cu.cuCtxSynchronize()
assert err == cu.CUresult.CUDA_SUCCESS, err
print("SANITIZE_CASE_OK")
