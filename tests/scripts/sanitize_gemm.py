"""GEMM shapes for compute-sanitizer (memcheck, racecheck) with no framework but aotkernels.

Every path the device's image holds (mma.sync; wgmma on sm_90a, forced with
AOTKERNELS_GEMM_PATH; the clustered and the swapped wgmma tiles forced in place of the table's,
the K-split clusters with more tiles than clusters too), every operand dtype, layout and
scale mode, bias and K = 0, on small odd shapes. Each operand lives in a device buffer of exactly
its span (a tail over-read is a memcheck error), passed as a DLPack view; row padding holds large
values that would show in the results. Inputs are small integers and scales powers of two, so
results are checked exactly with numpy.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
from cuda.bindings import driver as cu

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aotkernels as ak
from aotkernels import _core, device, loader
from aotkernels.ops import _op, gemm
from helpers.fake_dlpack import FakeCudaArray
from helpers.raw_buffers import to_host

ENV = "AOTKERNELS_GEMM_PATH"
_keep: list[Any] = []
rng = np.random.default_rng(0)


def _ok(result: tuple[Any, ...]) -> None:
    assert result[0] == cu.CUresult.CUDA_SUCCESS, result[0]


def upload(data: bytes) -> int:
    """A device buffer of exactly len(data) bytes holding data; its address."""
    device.cuda_driver()
    ctx = device.device_info(0).context
    _ok(cu.cuCtxSetCurrent(cu.CUcontext(ctx)))
    cap = _core.empty(ctx, 0, [max(len(data), 1)], 0, 8)
    _keep.append(cap)
    ptr = int(_core.dlpack_info(cap)[0])
    if data:
        _ok(cu.cuMemcpyHtoD(ptr, data, len(data)))
    return ptr


def _fp8_codes(exp_bits: int, man_bits: int, bias: int) -> dict[float, int]:
    """value -> byte of an fp8 format (the first code of each value: +0 for 0)."""
    codes: dict[float, int] = {}
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e = (code >> man_bits) & ((1 << exp_bits) - 1)
        f = code & ((1 << man_bits) - 1)
        if e == 0:
            v = sign * f * 2.0 ** (1 - bias - man_bits)
        else:
            v = sign * (1 + f / 2**man_bits) * 2.0 ** (e - bias)
        codes.setdefault(v, code)
    return codes


_FP8 = {"float8_e4m3fn": _fp8_codes(4, 3, 7), "float8_e5m2": _fp8_codes(5, 2, 15)}
ITEM = {"float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1,
        "float32": 4}  # fmt: skip


def encode(vals: np.ndarray, dtype: str) -> bytes:
    """Bytes of small integers (or float32 values) in ``dtype``."""
    if dtype == "float16":
        return vals.astype(np.float16).tobytes()
    if dtype == "bfloat16":  # exact values: the high half of the float32
        return (vals.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    if dtype == "int8":
        return vals.astype(np.int8).tobytes()
    if dtype == "float32":
        return vals.astype(np.float32).tobytes()
    table = _FP8[dtype]
    return bytes(table[float(v)] for v in vals.ravel())


def operand(vals: np.ndarray, dtype: str, col_major: bool, tma: bool) -> FakeCudaArray:
    """``vals`` [R, C] row-major (or column-major) in an exact-size buffer; rows padded to 16
    bytes when ``tma`` (the padding holds 3 * 16, which would show in any sum)."""
    rows, cols = vals.shape
    inner, outer = (rows, cols) if col_major else (cols, rows)
    step = 16 // ITEM[dtype]
    pitch = -(-max(inner, 1) // step) * step if tma else max(inner, 1)
    grid = np.full((outer, pitch), 48, np.int64)
    grid[:, :inner] = vals.T if col_major else vals
    span = grid.ravel()[: (outer - 1) * pitch + inner] if outer and inner else grid.ravel()[:0]
    ptr = upload(encode(span, dtype))
    strides = (1, pitch) if col_major else (pitch, 1)
    return FakeCudaArray((rows, cols), dtype, strides, 0, ptr)


def check(out: int, shape: tuple[int, int], ref: np.ndarray, int32: bool = False) -> None:
    got = to_host(out, shape[0] * shape[1]).reshape(shape)
    if int32:
        got = got.view(np.int32)
    want = ref.astype(np.int32) if int32 else ref.astype(np.float32)
    assert np.array_equal(got, want), (shape, np.abs(got - want).max())


def ints(shape: tuple[int, ...], lo: int = -3, hi: int = 3) -> np.ndarray:
    return rng.integers(lo, hi + 1, shape)


def pow2(shape: tuple[int, ...]) -> np.ndarray:
    return np.exp2(rng.integers(-1, 2, shape)).astype(np.float32)


def run_matmul(path: str, m: int, n: int, k: int) -> None:
    for dtype, layouts in (("float16", ("kn",)), ("bfloat16", ("kk", "kn", "mk", "mn"))):
        for layout in layouts:
            av, bv = ints((m, k)), ints((k, n))
            a = operand(av, dtype, layout[0] == "m", path == "wgmma")
            b = operand(bv, dtype, layout[1] == "k", path == "wgmma")
            out = upload(bytes(4 * m * n))
            ak.matmul(a, b, "float32", out=FakeCudaArray((m, n), "float32", None, 0, out))
            check(out, (m, n), av @ bv)


# Every scale mode for e4m3; fewer for the others (sanitizer time): the kernels share the code.
MODES = {
    "float8_e4m3fn": ["none", "tensor", "vector", "block"],
    "float8_e5m2": ["none", "block"],
    "int8": ["none", "vector"],
}


def run_scaled_mm(
    path: str, m: int, n: int, k: int, modes: dict[str, list[str]] | None = None
) -> None:
    kb, nb = -(-k // 128), -(-n // 128)
    for dtype, dtype_modes in (modes or MODES).items():
        for layout in ("kk",) if path == "wgmma" else ("kk", "mn"):
            av, bv = ints((m, k)), ints((k, n))
            a = operand(av, dtype, layout[0] == "m", path == "wgmma")
            b = operand(bv, dtype, layout[1] == "k", path == "wgmma")
            acc = av @ bv
            for mode in dtype_modes:
                sa = sb = bias = None
                ref = acc.astype(np.float64)
                if mode == "tensor":
                    sa, sb = pow2((1,)), pow2((1,))
                    ref = ref * sa[0] * sb[0]
                elif mode == "vector":
                    sa, sb = pow2((m, 1)), pow2((n,))
                    bias = ints((n,), -9, 9).astype(np.float32)
                    ref = ref * sa * sb[None, :] + bias[None, :]
                elif mode == "block":
                    sa, sb = pow2((m, kb)), pow2((nb, kb))
                    ref = np.zeros((m, n))
                    for j in range(kb):
                        part = av[:, j * 128 : j * 128 + 128] @ bv[j * 128 : j * 128 + 128]
                        ref += part * sa[:, j : j + 1] * np.repeat(sb[:, j], 128)[None, :n]
                views = [None if s is None else FakeCudaArray(
                    s.shape, "float32", None, 0, upload(encode(s, "float32"))
                ) for s in (sa, sb, bias)]  # fmt: skip
                int32 = mode == "none" and dtype == "int8"
                out = upload(bytes(4 * m * n))
                res = FakeCudaArray((m, n), "int32" if int32 else "float32", None, 0, out)
                ak.scaled_mm(a, b, views[0], views[1], "int32" if int32 else "float32", views[2],
                             out=res)  # fmt: skip
                check(out, (m, n), ref, int32)


paths = ["mma_sync"]
if loader.family_on("gemm", 0).choice.target == "sm_90a":
    paths.append("wgmma")
for path in paths:
    os.environ[ENV] = path
    for m, n, k in ((7, 9, 33), (65, 130, 200)):
        run_matmul(path, m, n, k)
        run_scaled_mm(path, m, n, k)
if "wgmma" in paths:
    # Few tiles past 128 rows: 8-bit operands take wg_128x64 (its second tile row mostly past M).
    run_scaled_mm("wgmma", 130, 300, 200)
    # The clusters' shared B stages: 2 tile rows, the second cluster half empty.
    table = gemm._wgmma_tile
    fam = loader.family_on("gemm", 0)
    multicast = (
        v
        for v, info in fam.variants.items()
        if info.get("cluster", 1) > 1 and not info.get("ksplit")
    )
    for tile in multicast:
        gemm._wgmma_tile = lambda *args, tile=tile, **kwargs: tile
        _op._PLANS.clear()
        run_matmul("wgmma", 130, 300, 200)
    # The unswapped K-split clusters: 2 tile rows, and 69 tiles (more than the clusters: each
    # leader's receive area is handed back and refilled).
    for tile in (
        v for v, info in fam.variants.items() if info.get("ksplit") and not info.get("swap_ab")
    ):
        gemm._wgmma_tile = lambda *args, tile=tile, **kwargs: tile
        _op._PLANS.clear()
        run_matmul("wgmma", 130, 300, 200)
        run_scaled_mm("wgmma", 130, 300, 200)
        run_matmul("wgmma", 97, 4400, 200)
    # Two-level accumulation on 128 x 128 tiles (the table's from 4096 rows), 9 K stages: the
    # epilogue factors are read under the last trip's batch.
    gemm._wgmma_tile = lambda *args, **kwargs: "wg_128x128"
    _op._PLANS.clear()
    run_scaled_mm("wgmma", 260, 600, 1100, {"float8_e4m3fn": ["tensor", "vector"]})
    # The swapped tiles where they may run (a K-major, no block scales): several tile columns
    # along M, the last one partial; the K-split clusters also on 69 tiles (more than the
    # clusters: each leader's receive area is handed back and refilled).
    for tile in (v for v, info in fam.variants.items() if info.get("swap_ab")):

        def swapped(m: int, n: int, batch: int, sms: int, block: bool, a_kmajor: bool = True,
                    *rest: Any, tile: str = tile, **kwargs: Any) -> str:  # fmt: skip
            ok = batch == 1 and not block and a_kmajor
            return tile if ok else table(m, n, batch, sms, block, a_kmajor, *rest, **kwargs)

        gemm._wgmma_tile = swapped
        _op._PLANS.clear()
        run_matmul("wgmma", 40, 130, 200)
        run_scaled_mm("wgmma", 40, 130, 200)
        if fam.variants[tile].get("ksplit"):
            run_matmul("wgmma", 7, 4400, 200)
    gemm._wgmma_tile = table
    _op._PLANS.clear()
os.environ[ENV] = "mma_sync"  # K = 0: epilogue(0) on mma.sync
out = upload(bytes(4 * 5 * 7))
z = FakeCudaArray((5, 0), "bfloat16", (1, 1), 0, upload(b"\0\0"))
ak.matmul(z, FakeCudaArray((0, 7), "bfloat16", (7, 1), 0, upload(b"\0\0")), "float32",
          out=FakeCudaArray((5, 7), "float32", None, 0, out))  # fmt: skip
check(out, (5, 7), np.zeros((5, 7)))
print("SANITIZE_GEMM_OK")
