"""Small shapes of every op of every family with no framework but aotkernels itself, for
compute-sanitizer (memcheck, racecheck, initcheck, synccheck). Inputs are copied from the host
into device buffers and passed as DLPack views, misaligned and row-strided ones too.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aotkernels as ak
from helpers.raw_buffers import device_copy, to_host, view

rng = np.random.default_rng(0)


def randn(n: int) -> int:
    """A device buffer of ``n`` f32 normal values."""
    return device_copy(rng.standard_normal(n).astype(np.float32))


def row_buffers(rows: int, h: int) -> tuple[int, int, int, int, int]:
    """(pitch, x, second input, out, weight): ``rows`` rows of ``h`` f32 in rows ``pitch`` apart
    (both inputs), a contiguous out and an ``h`` weight; one spare element for a 4-byte shift."""
    pitch = h + 5
    x, other = randn(rows * pitch + 1), randn(rows * pitch + 1)
    return pitch, x, other, device_copy(np.zeros(rows * h + 1, np.float32)), randn(h)


ops = [ak.relu, ak.silu, ak.sigmoid, ak.gelu, lambda t, **k: ak.gelu(t, approximate="tanh", **k)]
for n in (1, 17, 4097):
    src = randn(n + 8)
    dst = device_copy(np.zeros(n + 8, np.float32))
    for op in ops:
        for off in (0, 1, 3):
            op(view(src + 4 * off, (n,)), out=view(dst + 4 * off, (n,)))
for rows, d in ((3, 46), (5, 111), (2, 1792)):
    src = randn(rows * (2 * d + 4))
    dst = device_copy(np.zeros(rows * d + 4, np.float32))
    for op in (ak.silu_and_mul, ak.gelu_and_mul):
        for off in (0, 1):
            x = view(src + 4 * off, (rows, 2 * d), (2 * d + 4, 1))
            op(x, out=view(dst + 4 * off, (rows, d)))
# norm and softmax: register-resident rows (46, 111, 1024), the scalar layout (odd hidden,
# misaligned rows) and the multi-pass path (100003), strided rows.
for rows, h in ((3, 46), (2, 111), (4, 1024), (2, 100003)):
    pitch, src, res, dst, w = row_buffers(rows, h)
    b = randn(h)
    for off in (0, 1):
        x = view(src + 4 * off, (rows, h), (pitch, 1))
        out = view(dst + 4 * off, (rows, h))
        ak.rms_norm(x, view(w, (h,)), out=out)
        ak.layer_norm(x, view(w, (h,)), view(b, (h,)), out=out)
        ak.layer_norm(x, out=out)
        ak.softmax(x, out=out)
        ak.fused_add_rms_norm(x, view(res + 4 * off, (rows, h), (pitch, 1)), view(w, (h,)))
# backward ops (grad first): misaligned and row-strided operands; softmax_backward with resident
# and streamed rows (20003), the norms' row kernel and column reduction (workspace from the runner).
for n in (1, 17, 4097):
    x = randn(n + 8)
    g = randn(n + 8)
    dst = device_copy(np.zeros(n + 8, np.float32))
    for op in (ak.relu_backward, ak.silu_backward, ak.sigmoid_backward, ak.gelu_backward):
        for off in (0, 1):
            op(view(g + 4 * off, (n,)), view(x, (n,)), out=view(dst + 4 * off, (n,)))
for rows, d in ((3, 46), (2, 1792)):
    x = randn(rows * (2 * d + 4))
    g = randn(rows * d + 4)
    dst = device_copy(np.zeros(rows * 2 * d + 4, np.float32))
    for op in (ak.silu_and_mul_backward, ak.gelu_and_mul_backward):
        for off in (0, 1):
            xv = view(x, (rows, 2 * d), (2 * d + 4, 1))
            op(view(g + 4 * off, (rows, d)), xv, out=view(dst + 4 * off, (rows, 2 * d)))
for rows, h in ((3, 46), (2, 111), (4, 1024), (2, 20003)):
    pitch, y, g, dst, w = row_buffers(rows, h)
    for off in (0, 1):
        yv = view(y + 4 * off, (rows, h), (pitch, 1))
        gv = view(g + 4 * off, (rows, h))
        ak.softmax_backward(gv, yv, out=view(dst + 4 * off, (rows, h)))
        if h <= 8192:  # the norms' backward keeps f32 rows of up to 8192 in registers
            ak.rms_norm_backward(gv, yv, view(w, (h,)))
            ak.layer_norm_backward(gv, yv, view(w, (h,)), view(w, (h,)))
            ak.layer_norm_backward(gv, yv)
to_host(dst, 4)  # synchronises and checks the context is healthy
print("SANITIZE_CASE_OK")
