"""GEMM on tensor cores: ``matmul`` (f16/bf16) and ``scaled_mm`` (fp8 e4m3/e5m2, int8).

Each GPU runs its own path (arch_matrix.toml, [families.gemm]): mma.sync on sm_75..sm_89 and
sm_120a, wgmma + TMA (warp-specialized, persistent) on sm_90a, tcgen05 on sm_100a (opt-in, see
``_tcgen05_enabled``). The image loaded for the device holds the entries its target can run;
this module picks one per call from the tile table below and the operands' layout.

Tile table (``_pick``), first match wins:

========================================  =====================================================
condition                                 variant
========================================  =====================================================
sm_100a, AOTKERNELS_GEMM_TCGEN05=1, TMA   ``tc_128x256``
sm_90a, TMA-legal operands, M <= 128      ``wg_64x128`` (one consumer warpgroup, more CTAs)
sm_90a, TMA-legal, 128x256 tiles < SMs/2  ``wg_64x128`` (fill the GPU)
sm_90a, TMA-legal                         ``wg_128x256``
otherwise, 128x128 tiles >= SMs           ``mma_128x128``
otherwise                                 ``mma_64x64``
========================================  =====================================================

"TMA-legal": K >= 1, both operands 16-byte aligned with a row stride that is a multiple of 16
bytes (and at least the row), and for 1-byte dtypes both operands K-major (``a`` row-major,
``b`` column-major). Everything else (odd strides, ``K == 0``) runs the mma.sync variants, which
take any layout and alignment. ``AOTKERNELS_GEMM_PATH=mma_sync|wgmma|tcgen05`` forces a path
(tests use it to run every path on one GPU).
"""

from __future__ import annotations

import math
import os
from typing import Any, NamedTuple

from .. import loader as _loader
from ..arch_matrix import split_dtype
from ..arrays import ITEMSIZE, TORCH_TYPES, ArrayInfo, dtype_name, stream_handle
from ..errors import NoKernelImageError
from ._common import check_disjoint, check_dtype, finish, operand, output, prepare

__all__ = ["matmul", "scaled_mm"]

FAMILY = "gemm"
MATMUL_DTYPES = ("f16", "bf16")
SCALED_DTYPES = ("fp8_e4m3", "fp8_e5m2", "int8")
_FP8 = ("fp8_e4m3", "fp8_e5m2")
_MAX_GRID_YZ = 65535  # CUDA grid.y and grid.z limit
_OUT_CODES = {"f32": 0, "f16": 1, "bf16": 2, "int32": 3}
# CUtensorMapDataType: UINT8 = 0 (fp8 and int8 move as bytes), FLOAT16 = 6, BFLOAT16 = 9.
_TMA_TYPES = {"f16": 6, "bf16": 9, "fp8_e4m3": 0, "fp8_e5m2": 0, "int8": 0}
_SCALE_BLOCK = 128  # DeepSeek block scales: 1 x 128 for a, 128 x 128 for b
_FLAG_A_MMAJOR, _FLAG_B_KMAJOR, _FLAG_BIAS = 1, 2, 4
_SCALE_NONE, _SCALE_TENSOR, _SCALE_VECTOR, _SCALE_BLOCK_MODE = 0, 1, 2, 3
_PATHS = ("mma_sync", "wgmma", "tcgen05")

# Dtype spellings accepted by out_dtype= (strings, NumPy / ml_dtypes, torch, JAX), by name.
_DTYPE_ALIASES = {
    "float32": "f32", "f32": "f32", "float": "f32",
    "float16": "f16", "f16": "f16", "half": "f16",
    "bfloat16": "bf16", "bf16": "bf16",
    "int32": "int32", "int": "int32",
    "float8_e4m3fn": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2", "fp8_e5m2": "fp8_e5m2",
    "int8": "int8",
}  # fmt: skip


def parse_dtype(op: str, arg: str, value: Any) -> str:
    """Our dtype name for a string, NumPy / ml_dtypes dtype, torch dtype or JAX scalar type."""
    if isinstance(value, str):
        name = value
    elif isinstance(value, type):  # np.float32, ml_dtypes.bfloat16, jnp.bfloat16
        try:
            import numpy

            name = numpy.dtype(value).name
        except (ImportError, TypeError):
            name = value.__name__
    elif hasattr(value, "name") and isinstance(value.name, str):  # np.dtype(...)
        name = value.name
    else:
        name = str(value)  # torch.float32 -> "torch.float32"
    key = name.removeprefix("torch.").removeprefix("jnp.")
    if key not in _DTYPE_ALIASES:
        raise TypeError(
            f"{op}: {arg} must be a dtype such as 'float32', 'bfloat16' or torch.float16, got "
            f"{value!r}"
        )
    return _DTYPE_ALIASES[key]


class _Operand(NamedTuple):
    ld: int  # row stride in elements of its memory layout
    major: str  # "k" (K is the unit-stride dim) or "m" / "n"


def _matrix_layout(op: str, arg: str, info: ArrayInfo, outer: str) -> _Operand:
    """How a 2-D operand lies in memory: one of its dims must have unit stride.

    ``outer`` is the letter of the non-K dim ("m" for a [M, K], "n" for b [K, N]).
    """
    if len(info.shape) != 2:
        want = "[M, K]" if arg == "a" else "[K, N]"
        raise ValueError(f"{op}: {arg} must be 2-D {want}, got shape {tuple(info.shape)}")
    (r, c), (sr, sc) = info.shape, info.strides
    k_is_rows = arg == "b"  # a is [M, K] (K = cols); b is [K, N] (K = rows)
    # Prefer K-major when both readings hold (a dim of size 1 has any stride).
    if k_is_rows:
        if sr == 1 or r == 1:
            return _Operand(sc if c > 1 else max(r, 1), "k")
        if sc == 1 or c == 1:
            return _Operand(sr if r > 1 else max(c, 1), outer)
    else:
        if sc == 1 or c == 1:
            return _Operand(sr if r > 1 else max(c, 1), "k")
        if sr == 1 or r == 1:
            return _Operand(sc if c > 1 else max(r, 1), outer)
    raise ValueError(
        f"{op}: {arg} must be row- or column-major (one dimension with stride 1), got strides "
        f"{tuple(info.strides)} for shape {tuple(info.shape)}; pass a contiguous copy"
    )


def _tma_legal(info: ArrayInfo, lay: _Operand, inner: int) -> bool:
    item = ITEMSIZE[info.dtype]
    return (
        info.ptr % 16 == 0
        and (lay.ld * item) % 16 == 0
        and lay.ld >= inner
        and lay.ld * item < 2**40
    )


def _tcgen05_enabled() -> bool:
    # The tcgen05 kernels are built into the sm_100a image but have never run on a Blackwell
    # GPU (none was available): until they have, they run only when asked for.
    return os.environ.get("AOTKERNELS_GEMM_TCGEN05", "") not in ("", "0")


class _Pick(NamedTuple):
    symbol: str
    variant: str
    path: str


def _pick(
    op: str,
    dtype: str,
    m: int,
    n: int,
    k: int,
    layout: str,
    tma_ok: bool,
    fam: Any,
    batch: int = 1,
) -> _Pick:
    """The variant for one call (the tile table in the module docstring). ``dtype`` names the
    entries (``"<a>x<b>"`` for mixed fp8 operands); ``batch`` matrices share the launch."""
    forced = os.environ.get("AOTKERNELS_GEMM_PATH", "")
    if forced and forced not in _PATHS:
        raise ValueError(f"AOTKERNELS_GEMM_PATH must be one of {', '.join(_PATHS)}, got {forced!r}")
    if forced == "tcgen05" and batch > 1:
        raise NotImplementedError(
            f"{op}: AOTKERNELS_GEMM_PATH=tcgen05 takes one matrix per call, got a batch of "
            f"{batch} (the tcgen05 kernels have no batch loop; unset it for batched matmul)"
        )
    sms = fam.device.sm_count
    if ITEMSIZE[split_dtype(dtype)[0]] == 1 and layout != "kk":
        tma_ok = False  # 8-bit wgmma / tcgen05 read both operands K-major only
    order: list[str] = []
    if tma_ok and k >= 1:
        if (_tcgen05_enabled() or forced == "tcgen05") and batch == 1:
            order.append("tc_128x256")
        big = batch * math.ceil(m / 128) * math.ceil(n / 256)
        # Measured on an H200 (bf16, K = 4096): 64x128 tiles win for M <= 128 (M = 128,
        # N = 4096: 272 vs 90 TFLOP/s), 128x256 tiles for large shapes (8192^3: 811 vs 501).
        order.append("wg_64x128" if m <= 128 or big < sms // 2 else "wg_128x256")
    tiles = batch * math.ceil(m / 128) * math.ceil(n / 128)
    order.append("mma_128x128" if tiles >= sms else "mma_64x64")
    base = f"ak_{op}_{dtype}_"
    for variant in order:
        path = fam.variants[variant]["path"]
        if forced and path != forced:
            continue
        symbol = base + variant + ("" if path == "mma_sync" else f"_{layout}")
        if symbol in fam.kernels:
            return _Pick(symbol, variant, path)
    dev = fam.device
    where = f"device {dev.index} ({dev.name}, cc {dev.cc_str}) runs image {fam.choice.target}"
    what = " x ".join(dtype_name(d) for d in split_dtype(dtype))
    if forced:
        raise NoKernelImageError(
            f"{op}: AOTKERNELS_GEMM_PATH={forced} has no {what} kernel for this "
            f"call ({where}; the {forced} path needs TMA-legal operands and its target)"
        )
    raise NoKernelImageError(
        f"{op}: no {what} GEMM kernel for {where}; {what} needs "
        "tensor cores this GPU lacks (fp8: sm_89+, bf16: sm_80+)"
    )


class _Scales(NamedTuple):
    mode_a: int
    mode_b: int
    a: ArrayInfo | None
    b: ArrayInfo | None
    sa: tuple[int, int]
    sb: tuple[int, int]


def _scale_candidates(
    info: ArrayInfo, vec: tuple[tuple[int, ...], ...], block: tuple[int, int]
) -> set[int]:
    shape = tuple(info.shape)
    modes = set()
    if math.prod(shape) == 1:
        modes.add(_SCALE_TENSOR)
    if shape in vec:
        modes.add(_SCALE_VECTOR)
    if shape == block:
        modes.add(_SCALE_BLOCK_MODE)
    return modes


def _vector_stride(info: ArrayInfo) -> int:
    """Element stride along the non-unit dim of a (L,), (L, 1) or (1, L) scale vector."""
    if len(info.shape) == 1:
        return info.strides[0]
    return info.strides[0] if info.shape[0] != 1 else info.strides[1]


def _scales(
    op: str, call: Any, dtype: str, m: int, n: int, k: int, scale_a: Any, scale_b: Any
) -> _Scales:
    """Scale modes from the scale shapes: per tensor (1 element), per row of a ((M,) or
    (M, 1)) / column of b ((N,) or (1, N)), or fp8 block scales: a (M, ceil(K/128)) and
    b (ceil(N/128), ceil(K/128)), which must come together."""
    if (scale_a is None) != (scale_b is None):
        raise ValueError(f"{op}: scale_a and scale_b must be given together (or both None)")
    if scale_a is None:
        return _Scales(_SCALE_NONE, _SCALE_NONE, None, None, (0, 0), (0, 0))
    sa = operand(op, "scale_a", scale_a, call)
    sb = operand(op, "scale_b", scale_b, call)
    check_dtype(op, "scale_a", sa, ("f32",))
    check_dtype(op, "scale_b", sb, ("f32",))
    kb, nb = math.ceil(k / _SCALE_BLOCK), math.ceil(n / _SCALE_BLOCK)
    ca = _scale_candidates(sa, ((m,), (m, 1)), (m, kb))
    cb = _scale_candidates(sb, ((n,), (1, n)), (nb, kb))
    if not ca:
        raise ValueError(
            f"{op}: scale_a.shape must be (1,), ({m},), ({m}, 1) or ({m}, {kb}) (1x128 blocks), "
            f"got {tuple(sa.shape)}"
        )
    if not cb:
        raise ValueError(
            f"{op}: scale_b.shape must be (1,), ({n},), (1, {n}) or ({nb}, {kb}) (128x128 "
            f"blocks), got {tuple(sb.shape)}"
        )
    plain_a, plain_b = ca - {_SCALE_BLOCK_MODE}, cb - {_SCALE_BLOCK_MODE}
    if _SCALE_BLOCK_MODE in ca and _SCALE_BLOCK_MODE in cb and not (plain_a and plain_b):
        if ITEMSIZE[dtype] != 1 or dtype == "int8":
            raise TypeError(f"{op}: block scales take fp8 operands, got {dtype_name(dtype)}")
        (sa0, sa1), (sb0, sb1) = sa.strides, sb.strides
        return _Scales(_SCALE_BLOCK_MODE, _SCALE_BLOCK_MODE, sa, sb, (sa0, sa1), (sb0, sb1))
    if not plain_a or not plain_b:
        raise ValueError(
            f"{op}: block scales need both scale_a ({m}, {kb}) and scale_b ({nb}, {kb}), got "
            f"{tuple(sa.shape)} and {tuple(sb.shape)}"
        )
    mode_a = _SCALE_TENSOR if _SCALE_TENSOR in plain_a else _SCALE_VECTOR
    mode_b = _SCALE_TENSOR if _SCALE_TENSOR in plain_b else _SCALE_VECTOR
    sa_s0 = _vector_stride(sa) if mode_a == _SCALE_VECTOR else 0
    sb_s0 = _vector_stride(sb) if mode_b == _SCALE_VECTOR else 0
    return _Scales(mode_a, mode_b, sa, sb, (sa_s0, 0), (sb_s0, 0))


def _tensor_maps(
    pick: _Pick, fam: Any, a: ArrayInfo, la: _Operand, b: ArrayInfo, lb: _Operand, m: int, n: int,
    k: int, folds: tuple[int, int] = (0, 0),
) -> list[tuple[int, int, int, int, int, int, int, int]]:  # fmt: skip
    """TMA descriptors of a and b, as the kernels expect them (arch_matrix.toml, gemm).

    ``folds``: rows (of the map's outer dimension) that the other matrices of a batch add to
    a's and b's maps (the kernels offset their outer coordinate by ``z * batch stride / ld``).
    """
    if pick.path == "mma_sync":
        return []
    v = fam.variants[pick.variant]
    item = ITEMSIZE[a.dtype]
    bk = int(v["k_bytes"]) // item
    box_inner = 128 // item
    maps = []
    for name, info, ld, outer_extent, tile, k_major, fold in (
        ("a", a, la.ld, m, int(v["bm"]), la.major == "k", folds[0]),
        ("b", b, lb.ld, n, int(v["bn"]), lb.major == "k", folds[1]),
    ):
        inner, outer = (k, outer_extent) if k_major else (outer_extent, k)
        outer += fold
        maps.append(
            (
                fam.field_offsets[f"tmap_{name}"],
                fam.ptr_offsets.index(fam.field_offsets[name]),
                _TMA_TYPES[info.dtype],
                inner,
                outer,
                ld * item,
                box_inner,
                tile if k_major else bk,
            )
        )
    return maps


# Torch fast path: (op, dtypes/shapes/strides/devices of every input, out_dtype, 16-byte
# alignment of a and b) -> (plan, out shape, out torch dtype). Pointers are the only per-call input.
_PLANS: dict[Any, tuple[Any, tuple[int, ...], Any]] = {}
_MAX_PLANS = 4096


def _torch_key(op: str, arrays: tuple[Any, ...], extra: Any) -> tuple[Any, list[int]] | None:
    key: list[Any] = [op, extra]
    ptrs = []
    for t in arrays:
        if t is None:
            key.append(None)
            ptrs.append(0)
            continue
        if type(t) not in TORCH_TYPES:
            return None
        p = t.data_ptr()
        key.append((t.dtype, t.shape, t.stride(), t.get_device()))
        ptrs.append(p)
    # TMA needs a and b 16-byte aligned (arrays[:2]); the other pointers do not shape the plan.
    key.append((ptrs[0] & 15 == 0, ptrs[1] & 15 == 0))
    return tuple(key), ptrs


class _Batch(NamedTuple):
    """The batch of one launch: ``n`` matrices, the k-th of a / b / d ``k * stride``
    elements on (stride 0: broadcast)."""

    n: int
    a: int
    b: int
    d: int


def _lead_strides(info: ArrayInfo, rank: int) -> list[int]:
    """Strides of ``info``'s batch dims right-aligned to ``rank`` dims (0 where broadcast)."""
    lead = len(info.shape) - 2
    out = [0] * (rank - lead)
    out += [st if n != 1 else 0 for n, st in zip(info.shape[:-2], info.strides[:-2], strict=True)]
    return out


def _batches(
    op: str, ai: ArrayInfo, bi: ArrayInfo, oi: ArrayInfo, shape: tuple[int, ...]
) -> tuple[list[tuple[int, int, int]], _Batch]:
    """The batch dims as few launches as their strides allow: (pointer offsets in elements of
    a, b, d per launch, the batch each launch runs). Dims merge where a, b and d all step
    through them uniformly (contiguous and broadcast batches become one launch)."""
    rank = len(shape)
    cols = list(
        zip(shape, _lead_strides(ai, rank), _lead_strides(bi, rank), oi.strides[:-2], strict=True)
    )
    dims: list[tuple[int, int, int, int]] = []
    for size, sa, sb, sd in cols:
        if size == 1:
            continue
        if dims:
            n0, a0, b0, d0 = dims[-1]
            if (a0, b0, d0) == (sa * size, sb * size, sd * size):
                dims[-1] = (n0 * size, sa, sb, sd)
                continue
        dims.append((size, sa, sb, sd))
    if not dims:
        return [(0, 0, 0)], _Batch(1, 0, 0, 0)
    inner = dims[-1]
    offsets = [(0, 0, 0)]
    for size, sa, sb, sd in dims[:-1]:
        offsets = [(x + i * sa, y + i * sb, z + i * sd) for i in range(size) for x, y, z in offsets]
    return offsets, _Batch(*inner)


def _check_out_batches(op: str, oi: ArrayInfo, m: int, n: int, ldd: int) -> None:
    """A written out's matrices must not overlap each other (rows are checked separately)."""
    extent = (m - 1) * ldd + n if m and n else 0
    dims = sorted((abs(st), sz) for sz, st in zip(oi.shape[:-2], oi.strides[:-2], strict=True)
                  if sz > 1)  # fmt: skip
    reach = extent
    for stride, size in dims:
        if stride < reach:
            raise ValueError(
                f"{op}: out must not overlap itself, got strides {tuple(oi.strides)} for shape "
                f"{tuple(oi.shape)}"
            )
        reach = stride * size


def _tma_fold(
    info: ArrayInfo, lay: _Operand, bs: int, batch: int, extent: int, k: int, bk: int
) -> int | None:
    """Rows a batched operand adds to its TMA map's outer dimension, or None when its batch
    cannot fold into one 2-D map: the batch stride must be whole rows, and an M/N-major
    operand (whose outer dimension is K) must have no partial last K stage, which would read
    the next matrix's rows instead of zeros."""
    if bs == 0 or batch == 1:
        return 0
    if bs % lay.ld or bs < 0:
        return None
    rows = bs // lay.ld
    if lay.major != "k" and k % bk:
        return None
    if (batch - 1) * rows + extent >= 2**31:  # TMA coordinates are 32-bit
        return None
    return (batch - 1) * rows


def _gemm(
    op: str,
    a: Any,
    b: Any,
    scale_a: Any,
    scale_b: Any,
    bias: Any,
    out_dtype: Any,
    out: Any,
    stream: Any,
) -> Any:
    # Only calls that allocate their output take the fast path: a caller's out= could overlap
    # an input with new pointers, which only the full validation below would catch.
    env = (os.environ.get("AOTKERNELS_GEMM_PATH"), os.environ.get("AOTKERNELS_GEMM_TCGEN05"))
    fast = _torch_key(op, (a, b, scale_a, scale_b, bias), (out_dtype, env)) if out is None else None
    if fast is not None:
        hit = _PLANS.get(fast[0])
        if hit is not None:
            plan, shape, tdtype = hit
            ptrs = fast[1]
            res = a.new_empty(shape, dtype=tdtype)
            dev = a.get_device()
            s = _torch_stream(dev) if stream is None else stream_handle(stream)
            plan(s, res.data_ptr(), *ptrs[:5])
            return res

    call = prepare(op, a, stream, "a")
    ai = call.x
    bi = operand(op, "b", b, call)
    allowed = MATMUL_DTYPES if op == "matmul" else SCALED_DTYPES
    check_dtype(op, "a", ai, allowed)
    mixed = op == "scaled_mm" and ai.dtype != bi.dtype and {ai.dtype, bi.dtype} == set(_FP8)
    if bi.dtype != ai.dtype and not mixed:
        other = " or the other fp8 type" if ai.dtype in _FP8 else ""
        raise TypeError(
            f"{op}: b.dtype must equal a.dtype ({dtype_name(ai.dtype)}){other}, got "
            f"{dtype_name(bi.dtype)}"
        )
    entry_dtype = f"{ai.dtype}x{bi.dtype}" if mixed else ai.dtype
    if op == "matmul":
        # Batched: leading dims broadcast as torch.matmul's do; each matrix is [M, K] / [K, N].
        for arg, arr, want in (("a", ai, "[..., M, K]"), ("b", bi, "[..., K, N]")):
            if len(arr.shape) < 2:
                raise ValueError(
                    f"{op}: {arg} must be at least 2-D {want}, got shape {tuple(arr.shape)}"
                )
        batch_shape = _broadcast(op, ai.shape[:-2], bi.shape[:-2])
        a2 = ai._replace(shape=ai.shape[-2:], strides=ai.strides[-2:])
        b2 = bi._replace(shape=bi.shape[-2:], strides=bi.strides[-2:])
    else:
        batch_shape = ()
        a2, b2 = ai, bi
    la = _matrix_layout(op, "a", a2, "m")
    lb = _matrix_layout(op, "b", b2, "n")
    (m, k), (k2, n) = a2.shape, b2.shape
    if k2 != k:
        where = (
            "b.shape[-2] must equal a.shape[-1]"
            if batch_shape
            else ("b.shape[0] must equal a.shape[1]")
        )
        raise ValueError(f"{op}: {where} ({k}), got b.shape {tuple(bi.shape)}")
    if op == "matmul":
        odt = ai.dtype if out_dtype is None else parse_dtype(op, "out_dtype", out_dtype)
        outs: tuple[str, ...] = ("f16", "bf16", "f32")
        sc = _scales(op, call, ai.dtype, m, n, k, None, None)
    else:
        if out_dtype is None:
            raise TypeError(f"{op}: out_dtype is required (e.g. 'bfloat16', or 'int32' for int8)")
        odt = parse_dtype(op, "out_dtype", out_dtype)
        sc = _scales(op, call, ai.dtype, m, n, k, scale_a, scale_b)
        if ai.dtype == "int8":
            outs = ("int32",) if sc.mode_a == _SCALE_NONE else ("f16", "bf16", "f32")
        else:
            outs = ("f16", "bf16", "f32")
    if odt not in outs:
        what = " without scales" if ai.dtype == "int8" and sc.mode_a == _SCALE_NONE else ""
        hint = ""
        if odt == "int32" and op == "scaled_mm" and ai.dtype == "int8":
            hint = " (int8 with scales gives f16/bf16/f32)"
        raise TypeError(
            f"{op}: out_dtype for {dtype_name(ai.dtype)} operands{what} must be one of "
            f"{', '.join(dtype_name(o) for o in outs)}, got {dtype_name(odt)}{hint}"
        )
    bi_info = None
    if bias is not None:
        if odt == "int32":
            raise TypeError(f"{op}: bias is not supported with an int32 output")
        bi_info = operand(op, "bias", bias, call)
        check_dtype(op, "bias", bi_info, (odt,))
        if tuple(bi_info.shape) != (n,):
            raise ValueError(f"{op}: bias.shape must be ({n},), got {tuple(bi_info.shape)}")
        if n > 1 and bi_info.strides[0] != 1:
            raise ValueError(
                f"{op}: bias must be contiguous, got stride {bi_info.strides[0]}; pass a "
                "contiguous copy"
            )
    res, oi = output(op, call, out, (*batch_shape, m, n), odt)
    if m and n and not (oi.strides[-1] == 1 or n == 1):
        raise ValueError(
            f"{op}: out must be row-major (unit stride along N), got strides {tuple(oi.strides)}"
        )
    ldd = oi.strides[-2] if m > 1 else n
    if m > 1 and n > 0 and abs(ldd) < n:
        raise ValueError(f"{op}: out must not overlap itself, got row stride {ldd} for N={n}")
    if out is not None:
        _check_out_batches(op, oi, m, n, ldd)
        for name, info in (("a", ai), ("b", bi), ("scale_a", sc.a), ("scale_b", sc.b),
                           ("bias", bi_info)):  # fmt: skip
            if info is not None:
                check_disjoint(op, "out", oi, name, info)
    if m == 0 or n == 0 or math.prod(batch_shape) == 0:
        return finish(call, res, out is None)

    offsets, bt = _batches(op, ai, bi, oi, batch_shape)
    fold_m = bt.b == 0 and la.major == "k" and bt.a == m * la.ld and bt.d == m * ldd
    if fold_m and m * bt.n <= _MAX_GRID_YZ * 64:  # mma.sync: grid.y of 64-row tiles
        # [batch, M, K] rows back to back times one b: a single GEMM of batch * M rows.
        m, bt = m * bt.n, _Batch(1, 0, 0, 0)
    fam = _loader.family_on(FAMILY, ai.device)
    layout = ("k" if la.major == "k" else "m") + ("k" if lb.major == "k" else "n")
    tma_ok = _tma_legal(ai, la, k if la.major == "k" else m) and _tma_legal(
        bi, lb, k if lb.major == "k" else n
    )
    folds: tuple[int | None, int | None] = (0, 0)
    if tma_ok and bt.n > 1:
        bk = min(int(v["k_bytes"]) for v in fam.variants.values() if v["path"] != "mma_sync")
        bk //= ITEMSIZE[ai.dtype]
        folds = (
            _tma_fold(ai, la, bt.a, bt.n, m if la.major == "k" else k, k, bk),
            _tma_fold(bi, lb, bt.b, bt.n, n if lb.major == "k" else k, k, bk),
        )
        tma_ok = folds[0] is not None and folds[1] is not None
    pick = _pick(op, entry_dtype, m, n, k, layout, tma_ok, fam, bt.n)
    v = fam.variants[pick.variant]
    flags = (_FLAG_A_MMAJOR if la.major == "m" else 0) | (_FLAG_B_KMAJOR if lb.major == "k" else 0)
    flags |= _FLAG_BIAS if bi_info is not None else 0
    bm, bn = int(v["bm"]), int(v["bn"])
    # mma_sync runs one matrix per grid.z (at most 65535 per launch); wgmma walks every tile of
    # every matrix from one persistent grid.
    chunk = min(bt.n, _MAX_GRID_YZ) if pick.path == "mma_sync" else bt.n
    if pick.path == "mma_sync":
        grid = (math.ceil(n / bn), math.ceil(m / bm), chunk)
        if grid[1] > 65535:
            raise ValueError(f"{op}: M must be at most {65535 * bm} on this path, got {m}")
    else:
        tiles = bt.n * math.ceil(m / bm) * math.ceil(n / bn)
        grid = (min(tiles, fam.device.sm_count), 1, 1)
    item_a, item_b, item_d = ITEMSIZE[ai.dtype], ITEMSIZE[bi.dtype], ITEMSIZE[odt]
    launches = [
        (oa + i * bt.a, ob + i * bt.b, od + i * bt.d, min(chunk, bt.n - i))
        for oa, ob, od in offsets
        for i in range(0, bt.n, chunk)
    ]
    from .. import _core

    plan, plan_count = None, 0
    for off_a, off_b, off_d, count in launches:
        launch_ptrs = (
            oi.ptr + off_d * item_d,
            ai.ptr + off_a * item_a,
            bi.ptr + off_b * item_b,
            sc.a.ptr if sc.a else 0,
            sc.b.ptr if sc.b else 0,
            bi_info.ptr if bi_info else 0,
        )
        if plan is None or count != plan_count:
            plan_count = count
            packed = fam.params.pack(
                *launch_ptrs, b"", b"", m, n, k, la.ld, lb.ld, ldd, *sc.sa, *sc.sb, count,
                bt.a, bt.b, bt.d, flags, _OUT_CODES[odt], sc.mode_a, sc.mode_b,
            )  # fmt: skip
            g = (grid[0], grid[1], count) if pick.path == "mma_sync" else grid
            plan = _core.LaunchPlan(
                pick.symbol,
                fam.kernels[pick.symbol],
                fam.device.context,
                list(g),
                [int(v["threads"]), 1, 1],
                int(v["smem"]),
                packed,
                fam.ptr_offsets,
                _tensor_maps(pick, fam, ai, la, bi, lb, m, n, k, (folds[0] or 0, folds[1] or 0)),
            )
        plan(call.stream, *launch_ptrs)
    if fast is not None and len(launches) == 1:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[fast[0]] = (plan, tuple(oi.shape), res.dtype)
    return finish(call, res, out is None)


def _broadcast(op: str, sa: tuple[int, ...], sb: tuple[int, ...]) -> tuple[int, ...]:
    """torch.matmul's batch shape: a's and b's leading dims broadcast together."""
    rank = max(len(sa), len(sb))
    pa, pb = (1,) * (rank - len(sa)) + sa, (1,) * (rank - len(sb)) + sb
    shape = []
    for x, y in zip(pa, pb, strict=True):
        if x != y and 1 not in (x, y):
            raise ValueError(
                f"{op}: the batch dims of a {sa} and b {sb} must broadcast (equal or 1), got "
                f"{x} against {y}"
            )
        shape.append(y if x == 1 else x)
    return tuple(shape)


def _torch_stream(dev: int) -> int:
    from ..arrays import torch_stream

    return int(torch_stream(dev))


def matmul(
    a: Any,
    b: Any,
    out_dtype: Any = None,
    *,
    bias: Any = None,
    out: Any = None,
    stream: Any = None,
) -> Any:
    """``a @ b (+ bias)`` on tensor cores: f16 / bf16 operands, f32 accumulation.

    Parameters
    ----------
    a : CUDA array [..., M, K], float16 or bfloat16; each matrix row- or column-major
        (strides tell)
    b : CUDA array [..., K, N], the same dtype, each matrix row- or column-major
        The leading (batch) dims broadcast against a's as in ``torch.matmul`` (any strides,
        stride 0 for broadcast dims included); the result is [*batch, M, N].
    out_dtype : dtype, optional
        float16, bfloat16 or float32 (string, NumPy/ml_dtypes, torch or JAX dtype); default
        a's dtype. Results are rounded once, from the f32 accumulator.
    bias : CUDA array (N,) of the output dtype, contiguous, optional
        Added to every row (of every matrix) in f32 before the rounding, as ``F.linear``.
    out : CUDA array [*batch, M, N], optional
        Each matrix row-major (unit stride along N; any row and batch strides); must not
        overlap a, b or bias.
    stream : int or stream object, optional
        Defaults to the current stream of a's framework.

    Any M, N, K (K = 0 gives zeros, plus bias). Batches run in one launch where a, b and out
    step through them with one stride each (contiguous and broadcast batches do), else one
    launch per remaining outer index. Operands that are not 16-byte aligned or whose row
    stride is not a multiple of 16 bytes run the slower mma.sync path on Hopper, as do batched
    M/N-major operands whose K is not a multiple of 64.
    """
    return _gemm("matmul", a, b, None, None, bias, out_dtype, out, stream)


def scaled_mm(
    a: Any,
    b: Any,
    scale_a: Any = None,
    scale_b: Any = None,
    out_dtype: Any = None,
    bias: Any = None,
    *,
    out: Any = None,
    stream: Any = None,
) -> Any:
    """``(a @ b) * scales (+ bias)`` for fp8 (e4m3, e5m2) and int8 operands.

    Parameters
    ----------
    a : CUDA array [M, K]; b : CUDA array [K, N] — the same dtype, float8_e4m3fn,
        float8_e5m2 or int8, or one e4m3 and one e5m2 (fp8 training's gradient x weight
        products; sm_89+). Hopper's fast path wants a row-major and b column-major (both
        K-major, as ``torch._scaled_mm``); other layouts run the mma.sync path.
    scale_a, scale_b : float32 CUDA arrays, or both None (no scaling)
        Per tensor: one element each. Per row / column: scale_a (M,) or (M, 1), scale_b (N,)
        or (1, N). fp8 block scales (DeepSeek-V3): scale_a (M, ceil(K/128)) for 1x128 blocks
        and scale_b (ceil(N/128), ceil(K/128)) for 128x128 blocks, any strides.
    out_dtype : dtype, required
        float16, bfloat16 or float32; int8 without scales gives int32 (exact).
    bias : CUDA array (N,) of out_dtype, optional; added after scaling.
    out, stream : as for :func:`matmul`.
    """
    return _gemm("scaled_mm", a, b, scale_a, scale_b, bias, out_dtype, out, stream)
