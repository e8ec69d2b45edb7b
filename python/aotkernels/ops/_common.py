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
    ITEMSIZE,
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
    "PlanEntry",
    "byte_span",
    "check_disjoint",
    "check_dtype",
    "check_rows_disjoint",
    "finish",
    "joint_rows_view",
    "make_plan",
    "operand",
    "output",
    "prepare",
    "remember",
    "rows_view",
    "torch_fast",
    "torch_fast1",
]


class Call(NamedTuple):
    """An op's primary input, read once, with the stream it will run on."""

    x: ArrayInfo
    stream: int
    name: str = "x"  # the primary input's argument name, for messages


def prepare(op: str, x: Any, stream: Any, arg: str = "x") -> Call:
    """Read ``x`` and choose the stream: ``stream=``, else the framework's current one."""
    fw = framework_of(x, op, arg)
    if stream is None:
        # The framework's current stream of x's device. torch/CuPy need the device first.
        if fw.name in ("torch", "cupy"):
            info = fw.info(x, op, arg, 0)
            return Call(info, fw.current_stream(info.device), arg)
        s = 0
    else:
        s = stream_handle(stream)
    return Call(fw.info(x, op, arg, s), s, arg)


def operand(op: str, arg: str, y: Any, call: Call) -> ArrayInfo:
    """A further input: same framework family rules, same device as ``x``."""
    info = framework_of(y, op, arg).info(y, op, arg, call.stream)
    if info.device != call.x.device:
        raise ValueError(
            f"{op}: {arg} must be on the same device as {call.name} (cuda:{call.x.device}), got "
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
        check_rows_disjoint(op, "out", o_split[0], o_split[1], o_split[2])
        return x_split[0], x_split[1], x_split[2], o_split[2]
    cols = x.shape[-1]
    rows = math.prod(x.shape) // cols
    x_rs = x_split[2] if x_split[1] == cols else cols
    o_rs = o_split[2] if o_split[1] == cols else cols
    check_rows_disjoint(op, "out", rows, cols, o_rs)
    return rows, cols, x_rs, o_rs


def check_rows_disjoint(op: str, arg: str, rows: int, cols: int, row_stride: int) -> None:
    """A written array's rows must not overlap each other (stride 0, overlapping strides)."""
    if rows > 1 and cols > 0 and abs(row_stride) < cols:
        raise ValueError(
            f"{op}: {arg} must not overlap itself, got row stride {row_stride} for rows of "
            f"{cols} elements"
        )


def byte_span(info: ArrayInfo) -> tuple[int, int] | None:
    """The byte range [lo, hi) an array touches, or None when it is empty."""
    if any(n == 0 for n in info.shape):
        return None
    item = ITEMSIZE.get(info.dtype, 1)
    lo = hi = 0
    for n, st in zip(info.shape, info.strides, strict=True):
        reach = (n - 1) * st
        lo += min(0, reach)
        hi += max(0, reach)
    return info.ptr + lo * item, info.ptr + (hi + 1) * item


def check_disjoint(op: str, a: str, ai: ArrayInfo, b: str, bi: ArrayInfo) -> None:
    """``ValueError`` when ``a`` (written) and ``b`` share memory; rows of one would race with
    or read the other's output."""
    sa, sb = byte_span(ai), byte_span(bi)
    if sa is not None and sb is not None and sa[0] < sb[1] and sb[0] < sa[1]:
        raise ValueError(
            f"{op}: {a} must not overlap {b}, got {a} at [{sa[0]:#x}, {sa[1]:#x}) and {b} at "
            f"[{sb[0]:#x}, {sb[1]:#x})"
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
        raise ValueError(
            f"{op}: out must not partially overlap {call.name} (in place needs equal strides)"
        )
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


class PlanEntry(NamedTuple):
    plan: Any  # _core.LaunchPlan
    out_shape: tuple[int, ...] | None  # for the allocation; None: torch.empty_like(x)
    # Overlap check on every hit, for ops that write caller memory: byte extent per pointer
    # slot, the written slots, and whether out may alias x exactly (same layout).
    extents: tuple[int, ...] | None
    written: tuple[int, ...]
    inplace_ok: bool


_PLANS: dict[Any, PlanEntry] = {}
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


def _extent(info: ArrayInfo | None) -> int:
    span = None if info is None else byte_span(info)
    return 0 if span is None else span[1] - span[0]


def remember(
    key: Any,
    plan: Any,
    slots: Sequence[ArrayInfo | None],
    *,
    allocated: bool,
    written: tuple[int, ...] = (0,),
    may_alias: bool = True,
) -> None:
    """Cache ``plan`` for the torch fast path (``key`` None: nothing to cache).

    ``slots`` are the arrays in the kernel's pointer order, out first. The fast path allocates
    as the torch adapter did (``Framework.empty``): like x for a contiguous x of out's shape,
    else ``new_empty``. When the op writes memory the caller passed in, every hit re-checks
    that the written ranges overlap nothing else (pointers change between calls); ``may_alias``
    False forbids even an exact alias of slots 0 and 1 (ops whose two written arrays must
    differ).
    """
    if key is None:
        return
    out, x = slots[0], slots[1]
    assert out is not None and x is not None
    like_x = tuple(out.shape) == tuple(x.shape) and x.obj.is_contiguous()
    checks = not allocated or written != (0,)
    entry = PlanEntry(
        plan,
        None if like_x else tuple(out.shape),
        tuple(_extent(s) for s in slots) if checks else None,
        written,
        may_alias and tuple(out.strides) == tuple(x.strides),
    )
    if len(_PLANS) >= _MAX_PLANS:
        _PLANS.clear()
    _PLANS[key] = entry


def _overlaps(entry: PlanEntry, ptrs: list[int]) -> bool:
    ext = entry.extents
    assert ext is not None
    for w in entry.written:
        pw, ew = ptrs[w], ext[w]
        for j, (pj, ej) in enumerate(zip(ptrs, ext, strict=True)):
            if j == w or not (pj < pw + ew and pw < pj + ej):
                continue
            same = {w, j} == {0, 1} and pj == pw and entry.inplace_ok
            if not same:
                return True
    return False


def torch_fast1(kernel: str, out: Any, x: Any, stream: Any, extra: Any = None) -> tuple[Any, Any]:
    """``torch_fast`` for ops with one input (x) and one output: the per-call host cost of the
    elementwise ops is mostly here, so the general loop is unrolled by hand."""
    if type(x) not in TORCH_TYPES:
        return None, None
    xp = x.data_ptr()
    dev = x.get_device()
    if out is None:
        key: Any = (kernel, extra, x.dtype, x.shape, x.stride(), dev, xp & 15 == 0)
    elif type(out) in TORCH_TYPES:
        op_ = out.data_ptr()
        key = (kernel, extra, x.dtype, x.shape, x.stride(), dev, out.dtype, out.shape,
               out.stride(), out.get_device(), (xp | op_) & 15 == 0)  # fmt: skip
    else:
        return None, None
    try:
        hit = _PLANS.get(key)
    except TypeError:  # an unhashable scalar argument: let the slow path judge it
        return None, None
    if hit is None:
        return None, key
    if out is None:
        res = _arrays.torch_empty_like(x) if hit.out_shape is None else x.new_empty(hit.out_shape)
        op_ = res.data_ptr()
    else:
        ext = hit.extents
        assert ext is not None
        if (op_ == xp and not hit.inplace_ok) or (
            op_ != xp and op_ < xp + ext[1] and xp < op_ + ext[0]
        ):
            return None, key  # overlapping out: the slow path names it
        res = out
    s = _arrays.torch_stream(dev) if stream is None else stream_handle(stream)
    hit.plan(s, op_, xp)  # failures raise AotKernelsError from _core
    return res, None


def torch_fast(
    kernel: str, out: Any, arrays: Sequence[Any], stream: Any, extra: Any = None
) -> tuple[Any, Any]:
    """Run a known (op, layouts) on torch tensors without re-validating.

    ``arrays`` are the inputs in the kernel's pointer order after out (None where absent),
    x first; ``extra`` holds the scalar arguments that shape the launch. Returns
    ``(result, None)`` on a hit, ``(None, key)`` on a miss (``key`` None when the fast path
    does not apply), so that the slow path can ``remember`` the plan it builds.
    """
    x = arrays[0]
    if type(x) not in TORCH_TYPES:
        return None, None
    key: list[Any] = [kernel, extra]
    ptrs = [0]
    align = 0
    for a in arrays:
        if a is None:
            key.append(None)
            ptrs.append(0)
            continue
        if type(a) not in TORCH_TYPES:
            return None, None
        key.append((a.dtype, a.shape, a.stride(), a.get_device()))
        p = a.data_ptr()
        ptrs.append(p)
        align |= p
    if out is not None:
        if type(out) not in TORCH_TYPES:
            return None, None
        key.append((out.dtype, out.shape, out.stride(), out.get_device()))
        ptrs[0] = out.data_ptr()
        align |= ptrs[0]
    key.append(align & 15 == 0)  # launch configs take the vector path only when aligned
    tkey = tuple(key)
    try:
        hit = _PLANS.get(tkey)
    except TypeError:  # an unhashable scalar argument: let the slow path judge it
        return None, None
    if hit is None:
        return None, tkey
    if out is None:
        res = _arrays.torch_empty_like(x) if hit.out_shape is None else x.new_empty(hit.out_shape)
        ptrs[0] = res.data_ptr()  # a fresh allocation: 16-byte aligned, overlaps nothing
    else:
        res = out
    if hit.extents is not None and _overlaps(hit, ptrs):
        return None, tkey  # the slow path names the overlap
    dev = x.get_device()
    s = _arrays.torch_stream(dev) if stream is None else stream_handle(stream)
    hit.plan(s, *ptrs)  # failures raise AotKernelsError from _core
    return res, None


def finish(call: Call, out_obj: Any, allocated: bool) -> Any:
    return call.x.fw.finish(out_obj, call.stream) if allocated else out_obj
