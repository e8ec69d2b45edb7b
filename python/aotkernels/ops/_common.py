"""What every op shares: argument intake, validation messages, output allocation, launch.

Validation happens here, before any launch, with the messages RELIABILITY.md fixes:
"<op>: <arg> must be <expected>, got <actual>".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from .. import arrays as _arrays
from .. import loader as _loader
from ..arrays import (
    TORCH_TYPES,
    ArrayInfo,
    Framework,
    contiguous_strides,
    dtype_name,
    framework_of,
    stream_handle,
)

__all__ = [
    "Call",
    "check_dtype",
    "check_rows_disjoint",
    "finish",
    "joint_rows_view",
    "launch",
    "make_plan",
    "operand",
    "output",
    "prepare",
    "remember",
    "rows_view",
    "torch_fast",
]


class Call(NamedTuple):
    """An op's primary input, read once, with the stream it will run on."""

    x: ArrayInfo
    stream: int


def prepare(op: str, x: Any, stream: Any, arg: str = "x") -> Call:
    """Read ``x`` and choose the stream: ``stream=``, else the framework's current one."""
    fw = framework_of(x, op, arg)
    if stream is None:
        # The framework's current stream of x's device. torch/CuPy need the device first.
        if fw.name in ("torch", "cupy"):
            info = fw.info(x, op, arg, 0)
            return Call(info, fw.current_stream(info.device))
        s = 0
    else:
        s = stream_handle(stream)
    return Call(fw.info(x, op, arg, s), s)


def operand(op: str, arg: str, y: Any, call: Call) -> ArrayInfo:
    """A further input: same framework family rules, same device as ``x``."""
    info = framework_of(y, op, arg).info(y, op, arg, call.stream)
    if info.device != call.x.device:
        raise ValueError(
            f"{op}: {arg} must be on the same device as x (cuda:{call.x.device}), got "
            f"cuda:{info.device}"
        )
    return info


def check_dtype(op: str, arg: str, info: ArrayInfo, allowed: Sequence[str]) -> None:
    if info.dtype not in allowed:
        names = ", ".join(dtype_name(d) for d in allowed)
        raise TypeError(f"{op}: {arg}.dtype must be one of {names}, got {dtype_name(info.dtype)}")


def rows_view(op: str, arg: str, info: ArrayInfo) -> tuple[int, int, int]:
    """View ``info`` as [rows, cols] with contiguous cols and one row stride (in elements).

    Contiguous arrays become one row. Otherwise the last dim must be contiguous and the leading
    dims must collapse into one row stride (e.g. ``x[:, :h]``, ``x[::2]``); anything else
    (transposed, broadcast last dim) is a ``ValueError``: we never guess at a layout.
    """
    shape, strides = info.shape, info.strides
    if not shape:
        return 1, 1, 1
    n = math.prod(shape)
    if n == 0:
        return 0, shape[-1], shape[-1]  # nothing to launch; callers check rows * cols
    expected, contiguous = 1, True
    for size, stride in zip(reversed(shape), reversed(strides), strict=True):
        if size != 1 and stride != expected:
            contiguous = False
            break
        expected *= size
    if contiguous:
        return 1, n, n
    cols = shape[-1]
    if cols != 1 and strides[-1] != 1:
        raise ValueError(
            f"{op}: {arg} must have a contiguous last dimension (stride 1), got strides "
            f"{tuple(strides)} for shape {tuple(shape)}; pass a contiguous copy"
        )
    lead = [(s, st) for s, st in zip(shape[:-1], strides[:-1], strict=True) if s != 1]
    if not lead:
        return 1, cols, cols
    row_stride = lead[-1][1]
    step = row_stride
    for size, stride in reversed(lead):
        if stride != step:
            raise ValueError(
                f"{op}: {arg}'s leading dimensions must collapse into one row stride, got "
                f"strides {tuple(strides)} for shape {tuple(shape)}; pass a contiguous copy"
            )
        step = stride * size
    return n // cols, cols, row_stride


def joint_rows_view(
    op: str, x: ArrayInfo, x_split: tuple[int, int, int], out: ArrayInfo
) -> tuple[int, int, int, int]:
    """One [rows, cols] split that fits x and out (same shape): (rows, cols, x_rs, out_rs).

    When both are contiguous they share one long row; as soon as one is only row-strided,
    both are split at the last dimension (a contiguous array's row stride is then cols).
    """
    o_split = rows_view(op, "out", out)
    if o_split[:2] == x_split[:2]:
        check_rows_disjoint(op, o_split[0], o_split[1], o_split[2])
        return x_split[0], x_split[1], x_split[2], o_split[2]
    cols = x.shape[-1]
    rows = math.prod(x.shape) // cols
    x_rs = x_split[2] if x_split[1] == cols else cols
    o_rs = o_split[2] if o_split[1] == cols else cols
    check_rows_disjoint(op, rows, cols, o_rs)
    return rows, cols, x_rs, o_rs


def check_rows_disjoint(op: str, rows: int, cols: int, row_stride: int) -> None:
    """An output's rows must not overlap (stride-0 or overlapping rows would race)."""
    if rows > 1 and abs(row_stride) < cols:
        raise ValueError(
            f"{op}: out must not overlap itself, got row stride {row_stride} for rows of {cols}"
        )


def output(
    op: str, call: Call, out: Any, shape: Sequence[int], dtype: str
) -> tuple[Any, ArrayInfo]:
    """Allocate the result with x's framework, or validate ``out=`` against shape and dtype."""
    fw: Framework = call.x.fw
    if out is None:
        obj = fw.empty(call.x, shape, dtype)
        if fw.name in ("torch", "cupy"):
            return obj, fw.info(obj, op, "out", call.stream)
        return obj, _raw(obj, call, shape, dtype)  # our own DLPack buffer
    if not fw.mutable:
        raise TypeError(f"{op}: out= is not supported for {fw.name} arrays (they are immutable)")
    info = operand(op, "out", out, call)
    if info.ptr == call.x.ptr and tuple(info.strides) != tuple(call.x.strides):
        raise ValueError(f"{op}: out must not partially overlap x (in place needs equal strides)")
    if tuple(info.shape) != tuple(shape):
        raise ValueError(f"{op}: out.shape must be {tuple(shape)}, got {tuple(info.shape)}")
    if info.dtype != dtype:
        raise TypeError(
            f"{op}: out.dtype must be {dtype_name(dtype)}, got {dtype_name(info.dtype)}"
        )
    return out, info


def _raw(obj: Any, call: Call, shape: Sequence[int], dtype: str) -> ArrayInfo:
    """ArrayInfo of a freshly allocated contiguous ``DeviceBuffer`` (JAX / DLPack outputs)."""
    strides = contiguous_strides(shape)
    return ArrayInfo(obj, obj.ptr, tuple(shape), strides, dtype, call.x.device, call.x.fw)


# --- launch plans ---------------------------------------------------------------------------
# A plan is the validated, configured launch of one op for one set of array layouts; only the
# pointers change between calls. Torch tensors look their plan up by layout (the fast path) and
# skip validation; everything else builds a plan per call.
_PLANS: dict[Any, tuple[Any, tuple[int, ...] | None]] = {}
_MAX_PLANS = 4096  # dynamic shapes: bound the cache rather than grow without end


def make_plan(
    family: str,
    symbol: str,
    device: int,
    grid: tuple[int, int],
    block: tuple[int, int],
    *params: Any,
) -> Any:
    """A ``_core.LaunchPlan`` for ``symbol``; ``params`` in struct order (pointers included)."""
    from .. import _core

    fam = _loader.family_on(family, device)
    return _core.LaunchPlan(
        symbol,
        fam.kernels[symbol],
        fam.device.context,
        [grid[0], grid[1], 1],
        [block[0], block[1], 1],
        0,  # dynamic shared memory
        fam.params.pack(*params),
        fam.ptr_offsets,
    )


def launch(
    family: str,
    symbol: str,
    device: int,
    grid: tuple[int, int],
    block: tuple[int, int],
    stream: int,
    *params: Any,
) -> None:
    """A one-off launch: ``params`` in struct order, pointers included."""
    make_plan(family, symbol, device, grid, block, *params)(stream)


def remember(key: Any, plan: Any, out_shape: tuple[int, ...], x: ArrayInfo) -> None:
    """Cache ``plan`` for the torch fast path under ``key`` (None: nothing to cache).

    The fast path must allocate exactly as the torch adapter did (``Framework.empty``): like x
    (``empty_like``) for a contiguous x of the same shape, else ``new_empty(out_shape)``.
    """
    if key is None:
        return
    like_x = tuple(out_shape) == tuple(x.shape) and x.obj.is_contiguous()
    if len(_PLANS) >= _MAX_PLANS:
        _PLANS.clear()
    _PLANS[key] = (plan, None if like_x else tuple(out_shape))


def torch_fast(kernel: str, x: Any, out: Any, stream: Any) -> tuple[Any, Any]:
    """Run a known (op, layouts) on torch tensors ``(out, x)`` without re-validating.

    Returns ``(result, None)`` on a hit; ``(None, key)`` on a miss, where ``key`` (None when
    the fast path does not apply) lets the slow path remember the plan it builds.
    """
    if type(x) not in TORCH_TYPES:
        return None, None
    dev = x.get_device()
    if out is None:
        key: Any = (kernel, x.dtype, x.shape, x.stride(), dev)
        hit = _PLANS.get(key)
        if hit is None:
            return None, key
        # Same allocation as the slow path's (torch adapter's empty): same layout, same plan.
        res = _arrays.torch_empty_like(x) if hit[1] is None else x.new_empty(hit[1])
    else:
        if type(out) not in TORCH_TYPES:
            return None, None
        xs, os_ = x.stride(), out.stride()
        key = (kernel, x.dtype, x.shape, xs, dev, out.dtype, out.shape, os_, out.get_device())
        hit = _PLANS.get(key)
        # Same storage with other strides is a partial overlap: the slow path rejects it.
        if hit is None or (os_ != xs and out.data_ptr() == x.data_ptr()):
            return None, key
        res = out
    s = _arrays.torch_stream(dev) if stream is None else stream_handle(stream)
    hit[0](s, res.data_ptr(), x.data_ptr())  # failures raise AotKernelsError from _core
    return res, None


def finish(call: Call, out_obj: Any, allocated: bool) -> Any:
    return call.x.fw.finish(out_obj, call.stream) if allocated else out_obj
