"""One declaration per op, one runner for all of them.

An op is declared once, as an :class:`Op`: its array inputs (optional? written in place?), its
attributes, its outputs, a pure ``shapes`` rule (validation, and the shape and dtype of every
output, from array metadata alone) and a ``launch`` rule (the kernel launches, from metadata and
the device). Everything the ops share lives here and nowhere else:

* argument binding and attribute checks; the stream default (``stream=``, else the current
  stream of the input's framework, else the legacy default stream); the device (the inputs');
* output allocation by the caller's framework, or the checks of ``out=``;
* the overlap rules: a written array (``out=``, an input the op updates in place) must not
  overlap any other argument, except an output that exactly aliases the input it may replace;
  an array must not overlap itself; empty arrays overlap nothing;
* packing the family's parameter block by field name, binding pointers by argument name;
* the torch fast path: a prepared launch cached per (op, attributes, layouts, alignment), so that a
  repeated call is pointer patching and one ``cuLaunchKernel`` per launch;
* the front ends: eager calls on any DLPack array, ``torch.ops.aotkernels.<op>`` with fake
  implementation and autograd (``aotkernels._torch``), and XLA FFI custom calls for ``jax.jit``
  (``aotkernels._jax``), all generated from the declaration.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import numbers
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from .. import arrays as _arrays
from .. import loader as _loader
from ..arrays import TORCH_TYPES, ArrayInfo, dtype_name, framework_of, stream_handle
from ..dtypes import SPELLINGS  # dtype attributes: strings, NumPy / ml_dtypes, torch, JAX

__all__ = [
    "Args",
    "Attr",
    "Backward",
    "BackwardCtx",
    "Launch",
    "Meta",
    "Op",
    "OutSpec",
    "Output",
    "PackedLaunch",
    "REGISTRY",
    "TensorMap",
    "Tensor",
    "check_dtype",
    "check_vector",
    "pack_launch",
    "pack_tensor_map",
    "parse_dtype",
    "tensor_map_2d",
    "tensor_map_problem",
]

REGISTRY: dict[str, Op] = {}  # every declared op by name, in declaration order
MAX_TENSOR_MAP_RANK = 5  # cuTensorMapEncodeTiled's tiled maps (src/tensor_map.h)


# --- declarations -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tensor:
    """An array argument. ``mutated``: the op writes it in place."""

    name: str
    optional: bool = False
    mutated: bool = False


# Attribute kinds and the torch schema type each becomes.
ATTR_KINDS = {
    "float": "float",
    "int": "int",
    "str": "str",
    "bool": "bool",
    "dtype?": "ScalarType?",
    "float?": "float?",
    "int[]?": "int[]?",
}


@dataclass(frozen=True)
class Attr:
    """A scalar argument: ``kind`` is one of ``ATTR_KINDS``."""

    name: str
    kind: str
    default: Any

    def check(self, op: str, value: Any) -> Any:
        """The value, normalised (ints to int, dtypes to our names), or a ``TypeError``."""
        kind = self.kind
        if value is None and kind.endswith("?"):
            return None
        if kind in ("float", "float?"):
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"{op}: {self.name} must be a real number, got {_tname(value)}")
            return float(value)
        if kind == "int":
            if isinstance(value, bool):
                raise TypeError(f"{op}: {self.name} must be an int, got bool")
            try:
                return operator.index(value)
            except TypeError:
                raise TypeError(f"{op}: {self.name} must be an int, got {_tname(value)}") from None
        if kind == "str":
            if not isinstance(value, str):
                raise TypeError(f"{op}: {self.name} must be a str, got {_tname(value)}")
            return value
        if kind == "bool":
            if not isinstance(value, bool):
                raise TypeError(f"{op}: {self.name} must be a bool, got {_tname(value)}")
            return value
        if kind == "dtype?":
            return parse_dtype(op, self.name, value)
        assert kind == "int[]?", kind
        try:
            return tuple(operator.index(v) for v in value)
        except TypeError:
            raise TypeError(
                f"{op}: {self.name} must be a tuple of ints, got {_tname(value)}"
            ) from None


def _tname(value: Any) -> str:
    return type(value).__name__


@dataclass(frozen=True)
class Output:
    """An output. ``inplace_of``: the input it may exactly alias (same pointer and strides);
    ``hidden``: a workspace the runner allocates for the kernels, never returned."""

    name: str
    inplace_of: str | None = None
    hidden: bool = False


class OutSpec(NamedTuple):
    """Shape and dtype of one output."""

    shape: tuple[int, ...]
    dtype: str


class Meta(NamedTuple):
    """What the rules see of an array: no pointer, only its alignment (1, 2, 4, 8 or 16)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    dtype: str
    align: int = 16


class TensorMap(NamedTuple):
    """A TMA descriptor the launch encodes around the pointer of ``ptr_field`` on every call: the
    operand as a rank-N array (N <= 5), ``dims`` in elements innermost (unit-stride) first,
    ``strides`` the byte strides of dims 1..N-1, ``box`` the elements each copy moves per dim."""

    field: str  # the ``tmap`` parameter it fills
    ptr_field: str
    data_type: int  # CUtensorMapDataType
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]


def tensor_map_2d(
    field: str, ptr_field: str, data_type: int, inner: int, outer: int, row_bytes: int,
    box_inner: int, box_outer: int,
) -> TensorMap:  # fmt: skip
    """A matrix [outer, inner] with rows ``row_bytes`` apart (the GEMM family's maps)."""
    return TensorMap(
        field, ptr_field, data_type, (inner, outer), (row_bytes,), (box_inner, box_outer)
    )


def tensor_map_problem(m: TensorMap) -> str | None:
    """What the driver would refuse in ``m`` (the launch paths check it again), or None: the
    rank, extents in [1, 2**32], byte strides that are positive multiples of 16 below 2**40,
    boxes in [1, 256]. The base address is checked at launch (16-byte aligned)."""
    rank = len(m.dims)
    if not 1 <= rank <= MAX_TENSOR_MAP_RANK or len(m.box) != rank or len(m.strides) != rank - 1:
        return f"rank {rank} with {len(m.strides)} strides and {len(m.box)} box sizes"
    if any(not 1 <= d <= 2**32 for d in m.dims):
        return f"extents {m.dims} outside [1, 2**32]"
    if any(s <= 0 or s % 16 or s >= 2**40 for s in m.strides):
        return f"byte strides {m.strides} not positive multiples of 16 below 2**40"
    if any(not 1 <= b <= 256 for b in m.box):
        return f"box {m.box} outside [1, 256]"
    return None


def pack_tensor_map(m: TensorMap, offset: int, ptr_index: int) -> tuple[int, ...]:
    """The flattened form both launch paths decode (src/tensor_map.h, kTensorMapFields): offset,
    pointer index, data type, rank, dims[5], strides[4], box[5], unused entries 1 / 0 / 1."""
    bad = tensor_map_problem(m)
    if bad is not None:
        raise ValueError(f"tensor map {m.field}: {bad}")
    pad = MAX_TENSOR_MAP_RANK - len(m.dims)
    return (
        offset, ptr_index, m.data_type, len(m.dims), *m.dims, *(1,) * pad, *m.strides,
        *(0,) * pad, *m.box, *(1,) * pad,
    )  # fmt: skip


@dataclass(frozen=True)
class Launch:
    """One kernel launch: ``args`` maps the family's parameter fields to numbers, or pointer
    fields to the name of an input or output (None: null). Fields not named are 0."""

    symbol: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    args: Mapping[str, Any]
    smem: int = 0
    tensor_maps: tuple[TensorMap, ...] = ()


@dataclass(frozen=True)
class BackwardCtx:
    saved: Mapping[str, Any]  # the saved inputs / outputs by name
    attrs: Mapping[str, Any]
    needs: Mapping[str, bool]  # which inputs need a gradient

    def attr(self, name: str) -> Any:
        return self.attrs[name]


@dataclass(frozen=True)
class Backward:
    """``fn(ctx, grads) -> {input name: gradient}``; ``saved`` names inputs or outputs."""

    saved: tuple[str, ...]
    fn: Callable[[BackwardCtx, tuple[Any, ...]], dict[str, Any]]


class Args:
    """The arguments of one call as the rules see them (see :class:`Op`)."""

    def __init__(
        self,
        op: Op,
        metas: Mapping[str, Meta | None],
        attrs: Mapping[str, Any],
        device: int,
        outs: Mapping[str, Meta] | None = None,
    ) -> None:
        self.op = op.name
        self.family_name = op.family
        self.names = frozenset(metas)  # the op's input names
        self.attrs = attrs
        self._metas = metas
        self.device = device
        self._outs = outs or {}

    def __getitem__(self, name: str) -> Meta | None:
        return self._metas[name]

    def need(self, name: str) -> Meta:
        meta = self._metas[name]
        assert meta is not None, name
        return meta

    def attr(self, name: str) -> Any:
        return self.attrs[name]

    def out(self, name: str) -> Meta:
        return self._outs[name]

    @property
    def sm_count(self) -> int:
        from .. import device as _device

        return _device.device_info(self.device).sm_count

    def family(self) -> Any:
        return _loader.family_on(self.family_name, self.device)


@dataclass(frozen=True, eq=False)
class Op:
    """One op, declared once (module docstring). Calling it runs the op eagerly, or records it
    as ``torch.ops.aotkernels.<name>`` inside ``torch.compile``."""

    name: str
    family: str
    inputs: tuple[Tensor, ...]
    attrs: tuple[Attr, ...]
    outputs: tuple[Output, ...]
    shapes: Callable[[Args], tuple[OutSpec, ...]]
    launch: Callable[[Args], list[Launch]]
    returns: tuple[str, ...] = ("out",)
    backward: Backward | None = None
    # Extra state a launch depends on beyond arguments (e.g. environment switches): part of the
    # fast path's key.
    cache_key: Callable[[], Any] | None = None

    def __post_init__(self) -> None:
        REGISTRY[self.name] = self

    @property
    def mutates(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.inputs if t.mutated)

    @property
    def visible(self) -> tuple[Output, ...]:
        return tuple(o for o in self.outputs if not o.hidden)

    def __call__(self, *arrays: Any, out: Any = None, stream: Any = None, **attrs: Any) -> Any:
        front = _torch_front
        if front is not None:
            if front.compiling():
                # Inside torch.compile: record torch.ops.aotkernels.<op> (none of our Python is
                # traced).
                return front.call(self, arrays, attrs, out, stream)
            if arrays and type(arrays[0]) in TORCH_TYPES:
                res = _torch_fast(self, arrays, attrs, out, stream, False, False)
                if res is not _MISS:
                    return res
        return run(self, arrays, attrs, out, stream)


# ``aotkernels._torch`` once torch is loaded (it sets itself here when it registers the ops).
_torch_front: Any = None


def set_torch_front(front: Any) -> None:
    global _torch_front
    _torch_front = front


# --- shared checks -------------------------------------------------------------------------------


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
    if key not in SPELLINGS:
        raise TypeError(
            f"{op}: {arg} must be a dtype such as 'float32', 'bfloat16' or torch.float16, got "
            f"{value!r}"
        )
    return SPELLINGS[key]


def check_dtype(op: str, arg: str, meta: Meta, allowed: Sequence[str]) -> None:
    if meta.dtype not in allowed:
        names = ", ".join(dtype_name(d) for d in allowed)
        raise TypeError(f"{op}: {arg}.dtype must be one of {names}, got {dtype_name(meta.dtype)}")


def check_vector(op: str, arg: str, meta: Meta, n: int, what: str = "") -> None:
    """``arg`` is a contiguous 1-D array of ``n`` elements (``what``, when given, says what n
    counts)."""
    if tuple(meta.shape) != (n,):
        what = f" ({what})" if what else ""
        raise ValueError(f"{op}: {arg}.shape must be ({n},){what}, got {tuple(meta.shape)}")
    if n > 1 and meta.strides[0] != 1:
        raise ValueError(
            f"{op}: {arg} must be contiguous, got stride {meta.strides[0]}; pass a contiguous copy"
        )


def _align(ptr: int) -> int:
    low = ptr & 15
    return 16 if low == 0 else low & -low


def _span(meta: Meta, ptr: int) -> tuple[int, int] | None:
    """The byte range [lo, hi) an array touches, or None when it is empty."""
    if any(n == 0 for n in meta.shape):
        return None
    item = _arrays.ITEMSIZE.get(meta.dtype, 1)
    lo = hi = 0
    for n, st in zip(meta.shape, meta.strides, strict=True):
        reach = (n - 1) * st
        lo += min(0, reach)
        hi += max(0, reach)
    return ptr + lo * item, ptr + (hi + 1) * item


def _self_overlapping(meta: Meta) -> bool:
    """Whether two distinct indices of a (non-empty) array reach the same element."""
    dims = sorted((abs(st), n) for n, st in zip(meta.shape, meta.strides, strict=True) if n > 1)
    reach = 0  # largest offset the dims so far reach
    for st, n in dims:
        if st <= reach:
            return True
        reach += st * (n - 1)
    return False


class _Rows(NamedTuple):
    """Where an array's bytes lie, from its pointer: ``n`` rows of ``length`` bytes, ``stride``
    bytes apart, the first at ``lo``. Arrays that are not rows of one stride are described by
    the one row that bounds them (``n == 1``), which overlaps whatever they might."""

    lo: int
    length: int
    stride: int
    n: int


def _rows(meta: Meta) -> _Rows | None:
    """``meta`` as _Rows (None when empty): its contiguous innermost dims make the row, the
    others must step by one stride (q, k and v of a fused QKV buffer are such rows)."""
    span = _span(meta, 0)
    if span is None:
        return None
    item = _arrays.ITEMSIZE.get(meta.dtype, 1)
    dims = sorted((st, n) for n, st in zip(meta.shape, meta.strides, strict=True) if n > 1)
    inner, k = 1, 0
    while k < len(dims) and dims[k][0] == inner:
        inner *= dims[k][1]
        k += 1
    rest = dims[k:]
    if rest and rest[0][0] > 0:
        step, n = rest[0][0], 1
        for st, cnt in rest:
            if st != step * n:
                break
            n *= cnt
        else:
            return _Rows(0, inner * item, step * item, n)
    if not rest:
        return _Rows(0, inner * item, inner * item, 1)
    return _Rows(span[0], span[1] - span[0], span[1] - span[0], 1)


def _overlap(pa: int, a: _Rows, pb: int, b: _Rows) -> bool:
    """Whether the bytes of a (at pa) and b (at pb) meet: exact for rows of one stride, else
    judged on the rows' bounding ranges (never misses an overlap)."""
    d = (pb + b.lo) - (pa + a.lo)  # b's first row, from a's
    stride = a.stride if b.n == 1 else b.stride
    if (a.n > 1 and b.n > 1 and a.stride != b.stride) or max(a.length, b.length) > stride:
        ha = (a.n - 1) * a.stride + a.length
        hb = (b.n - 1) * b.stride + b.length
        return d < ha and -d < hb
    # Row i of a and row j of b meet iff -b.length < d + (j - i) * stride < a.length.
    lo = max((-b.length - d) // stride + 1, -(a.n - 1))
    hi = min(-((d - a.length) // stride) - 1, b.n - 1)
    return lo <= hi


# --- the runner -----------------------------------------------------------------------------


class _Array(NamedTuple):
    name: str
    meta: Meta
    ptr: int
    written: bool
    inplace_of: str | None


def _partners(arrays: Sequence[_Array], rows: Sequence[_Rows | None], i: int) -> Iterator[int]:
    """The arrays the overlap rules check written, non-empty ``arrays[i]`` against: every other
    non-empty one, a pair of written arrays once."""
    for j, o in enumerate(arrays):
        if j != i and rows[j] is not None and not (o.written and j < i):
            yield j


def _may_alias(w: _Array, o: _Array) -> bool:
    """Whether one of the two is declared the in-place output of the other."""
    return o.name == w.inplace_of or w.name == o.inplace_of


def _check_overlaps(op: Op, arrays: Sequence[_Array]) -> None:
    """The overlap rules of the module docstring, on the arrays of one call."""
    rows = [_rows(a.meta) for a in arrays]
    for i, w in enumerate(arrays):
        rw = rows[i]
        if not w.written or rw is None:
            continue
        if _self_overlapping(w.meta):
            raise ValueError(
                f"{op.name}: {w.name} must not overlap itself, got strides {w.meta.strides} for "
                f"shape {w.meta.shape}"
            )
        for j in _partners(arrays, rows, i):
            o, ro = arrays[j], rows[j]
            assert ro is not None
            if not _overlap(w.ptr, rw, o.ptr, ro):
                continue
            sw, so = _span(w.meta, w.ptr), _span(o.meta, o.ptr)
            assert sw is not None and so is not None
            if _may_alias(w, o):
                if w.ptr == o.ptr and w.meta.strides == o.meta.strides:
                    continue  # exactly in place
                raise ValueError(
                    f"{op.name}: {w.name} must not partially overlap {o.name} (in place needs "
                    f"the same pointer and strides), got {w.name} at [{sw[0]:#x}, {sw[1]:#x}) "
                    f"and {o.name} at [{so[0]:#x}, {so[1]:#x})"
                )
            raise ValueError(
                f"{op.name}: {w.name} must not overlap {o.name}, got {w.name} at "
                f"[{sw[0]:#x}, {sw[1]:#x}) and {o.name} at [{so[0]:#x}, {so[1]:#x})"
            )


class PackedLaunch(NamedTuple):
    """A launch as both launch paths take it (``_core.PreparedLaunch`` and the XLA FFI handler)."""

    params: bytes  # the family's parameter block, zeros at pointer fields
    pointers: tuple[str | None, ...]  # per pointer field: the array it takes, by name (None: null)
    # per TMA descriptor, flattened (pack_tensor_map)
    tensor_maps: tuple[tuple[int, ...], ...]


def pack_launch(fam: Any, ln: Launch) -> PackedLaunch:
    """Pack ``ln``'s fields into ``fam``'s (a LoadedFamily's) parameter layout."""
    values: list[Any] = []
    pointers: list[str | None] = []
    for name, ptype in fam.param_fields:
        v = ln.args.get(name)
        if ptype == "ptr":
            pointers.append(v)
            values.append(0)
        elif ptype == "tmap":
            values.append(b"")
        else:
            values.append(0 if v is None else v)
    unknown = set(ln.args) - {n for n, _ in fam.param_fields}
    assert not unknown, f"{ln.symbol}: unknown parameter fields {sorted(unknown)}"
    ptr_fields = [n for n, t in fam.param_fields if t == "ptr"]
    maps = tuple(
        pack_tensor_map(m, fam.field_offsets[m.field], ptr_fields.index(m.ptr_field))
        for m in ln.tensor_maps
    )
    return PackedLaunch(fam.params.pack(*values), tuple(pointers), maps)


def _compile_launches(op: Op, launches: Sequence[Launch], device: int) -> tuple[Any, ...]:
    from .. import _core

    if not launches:
        return ()
    fam = _loader.family_on(op.family, device)
    prepared = []
    for ln in launches:
        packed = pack_launch(fam, ln)
        grid = [*ln.grid, 1, 1][:3]
        block = [*ln.block, 1, 1][:3]
        launch = _core.PreparedLaunch(
            ln.symbol,
            fam.kernels[ln.symbol],
            fam.device.context,
            grid,
            block,
            ln.smem,
            packed.params,
            fam.ptr_offsets,
            [v for m in packed.tensor_maps for v in m],
        )
        prepared.append((launch, packed.pointers))
    return tuple(prepared)


def _bind(op: Op, arrays: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    """Attribute values in declaration order (defaults filled, types checked)."""
    if len(arrays) > len(op.inputs):
        raise TypeError(f"{op.name}: takes {len(op.inputs)} array arguments, got {len(arrays)}")
    for t in op.inputs[len(arrays) :]:
        if not t.optional:
            raise TypeError(f"{op.name}: missing required argument {t.name!r}")
    unknown = set(attrs) - {a.name for a in op.attrs}
    if unknown:
        raise TypeError(f"{op.name}: unexpected keyword argument {sorted(unknown)[0]!r}")
    return tuple(a.check(op.name, attrs.get(a.name, a.default)) for a in op.attrs)


# Torch fast path: (op, attributes, layouts and alignment of every array) -> _Fast.
_PLANS: dict[Any, _Fast] = {}
_MAX_PLANS = 4096  # dynamic shapes: bound the cache rather than grow without end
# The cached launches are nanobind objects: dropped before interpreter shutdown, they are freed
# normally instead of being reported by nanobind as leaked when _core is torn down first.
atexit.register(_PLANS.clear)


def run(
    op: Op,
    arrays: Sequence[Any],
    attrs: Mapping[str, Any],
    out: Any,
    stream: Any,
    *,
    below_autograd: bool = False,
    want_outputs: bool = False,
) -> Any:
    """Run ``op`` eagerly (the torch fast path first, then the general path).

    Returns what the op declares in ``returns``, or with ``want_outputs`` the list of all its
    outputs (the torch front end's implementation)."""
    if below_autograd and arrays and type(arrays[0]) in TORCH_TYPES:
        res = _torch_fast(op, arrays, attrs, out, stream, True, want_outputs)
        if res is not _MISS:
            return res
    values = _bind(op, arrays, attrs)
    full = tuple(arrays) + (None,) * (len(op.inputs) - len(arrays))
    return _general(op, (arrays, attrs), full, values, out, stream, below_autograd, want_outputs)


_MISS = object()
_LIKE_X = "like x"  # the fast path allocates this output with torch.empty_like(x)


def _torch_key(
    op: Op, arrays: Sequence[Any], attrs: Mapping[str, Any], out: Any
) -> tuple[tuple[Any, ...], list[int]] | None:
    """The fast path's key of a call as made, and the arrays' pointers. The key holds the op,
    the attributes as given (values and types, so that only calls identical to a validated one
    hit), the environment the launch depends on, and each array's dtype, shape, strides,
    device and pointer alignment (flat: one tuple hashes faster than nested ones)."""
    key: list[Any] = [op]
    if attrs:
        items = tuple(attrs.items())
        key.append(items)
        key.append(tuple([type(v) for _, v in items]))
    if op.cache_key is not None:
        key.append(op.cache_key())
    ptrs = []
    for a in arrays:
        if a is None:
            key.append(None)
            ptrs.append(0)
        elif type(a) in TORCH_TYPES:
            p = a.data_ptr()
            key += (a.dtype, a.shape, a.stride(), a.get_device(), p & 15)
            ptrs.append(p)
        else:
            return None
    if out is not None:
        if type(out) not in TORCH_TYPES:
            return None
        key += (out.dtype, out.shape, out.stride(), out.get_device(), out.data_ptr() & 15)
    return tuple(key), ptrs


class _Fast(NamedTuple):
    """A cached torch call shape. Arrays are numbered inputs first, then outputs; a trailing
    slot holds 0 for null pointers."""

    launches: tuple[tuple[Any, tuple[int, ...]], ...]  # (_core.PreparedLaunch, array per pointer)
    allocs: tuple[Any, ...]  # per output: None (the caller's out=), _LIKE_X, (shape, dtype)
    # Per written array and other array that may overlap it: (i, rows of i, j, rows of j,
    # exact_ok); exact_ok: i may alias j exactly.
    overlaps: tuple[tuple[int, _Rows, int, _Rows, bool], ...]
    returns: tuple[int, ...]  # the arrays the call returns
    n_inputs: int
    hidden: tuple[int, ...]  # the workspaces


def _torch_fast(
    op: Op,
    arrays: Sequence[Any],
    attrs: Mapping[str, Any],
    out: Any,
    stream: Any,
    below_autograd: bool,
    want_outputs: bool,
) -> Any:
    """A call identical in layout to a validated one: allocate, check overlaps, launch."""
    found = _torch_key(op, arrays, attrs, out)
    if found is None:
        return _MISS
    key, ptrs = found
    try:
        hit = _PLANS.get(key)
    except TypeError:  # an unhashable attribute: the general path judges it
        return _MISS
    if hit is None:
        return _MISS
    x = arrays[0]
    if not below_autograd and _arrays.torch_grad_enabled():
        for a in arrays:
            if a is not None and a.requires_grad:
                return _MISS  # the general path routes it through autograd or refuses it
    args: list[Any] = list(arrays)
    if len(args) < hit.n_inputs:
        pad = hit.n_inputs - len(args)
        args += [None] * pad
        ptrs += [0] * pad
    for alloc in hit.allocs:
        if alloc is None:  # the caller's out=
            res = out
        elif alloc is _LIKE_X:
            res = _arrays.torch_empty_like(x)  # ~1 us cheaper than new_empty
        else:
            res = x.new_empty(alloc[0], dtype=alloc[1])
        args.append(res)
        ptrs.append(res.data_ptr())
    ptrs.append(0)
    for i, rows_i, j, rows_j, exact_ok in hit.overlaps:
        pi, pj = ptrs[i], ptrs[j]
        if _overlap(pi, rows_i, pj, rows_j) and not (exact_ok and pi == pj):
            return _MISS  # the general path names the overlap
    s = _arrays.torch_stream(x.get_device()) if stream is None else stream_handle(stream)
    for launch, idx in hit.launches:
        launch(s, *[ptrs[k] for k in idx])
    if stream is not None:
        for k in hit.hidden:  # workspaces die here while the kernels may still run on stream
            _arrays.torch_record_stream(args[k], s)
    if want_outputs:
        return args[hit.n_inputs :]
    if len(hit.returns) == 1:
        return args[hit.returns[0]]
    return tuple(args[k] for k in hit.returns)


def _needs_autograd(full: Sequence[Any]) -> bool:
    return _arrays.torch_grad_enabled() and any(
        a is not None and type(a) in TORCH_TYPES and a.requires_grad for a in full
    )


def _returns(op: Op, inputs: Sequence[Any], results: Sequence[Any]) -> Any:
    by_name = {t.name: a for t, a in zip(op.inputs, inputs, strict=True)}
    by_name.update({o.name: r for o, r in zip(op.outputs, results, strict=True)})
    vals = tuple(by_name[n] for n in op.returns)
    return vals[0] if len(vals) == 1 else vals


def _general(
    op: Op,
    raw: tuple[Sequence[Any], Mapping[str, Any]],  # the call as made: the fast path's key
    full: Sequence[Any],
    values: tuple[Any, ...],
    out: Any,
    stream: Any,
    below_autograd: bool,
    want_outputs: bool,
) -> Any:
    lead = next((i for i, a in enumerate(full) if a is not None), None)
    assert lead is not None, f"{op.name}: no array argument"
    lead_name = op.inputs[lead].name
    fw = framework_of(full[lead], op.name, lead_name)
    if fw.name == "jax":
        from .. import _jax

        # Traced arrays have no memory to hand over through DLPack: only the XLA path can take
        # them (and says so when this build lacks it).
        if _jax.available() or _jax.traced(full):
            if out is not None:
                raise TypeError(f"{op.name}: out= is not supported for jax arrays (immutable)")
            return _jax.call(op, full, dict(zip((a.name for a in op.attrs), values, strict=True)))
    if fw.name == "torch" and not below_autograd and type(full[lead]) not in TORCH_TYPES:
        # A tensor subclass (FakeTensor and FunctionalTensor while torch.compile traces a
        # backward, or a user's subclass): the dispatcher, not a raw pointer, must run it.
        from .. import _torch

        attr_map = dict(zip((a.name for a in op.attrs), values, strict=True))
        return _torch.call(op, full, attr_map, out, stream)
    # The stream first: torch / CuPy need the device of the lead input to name theirs.
    if stream is None:
        if fw.name in ("torch", "cupy"):
            s = fw.current_stream(fw.info(full[lead], op.name, lead_name, 0).device)
        else:
            s = 0
    else:
        s = stream_handle(stream)
    infos: dict[str, ArrayInfo | None] = {}
    for t, a in zip(op.inputs, full, strict=True):
        if a is None and t.optional:
            infos[t.name] = None
            continue
        info = framework_of(a, op.name, t.name).info(a, op.name, t.name, s)
        lead_info = infos.get(lead_name)
        if lead_info is not None and info.device != lead_info.device:
            raise ValueError(
                f"{op.name}: {t.name} must be on the same device as {lead_name} "
                f"(cuda:{lead_info.device}), got cuda:{info.device}"
            )
        infos[t.name] = info
    x = infos[lead_name]
    assert x is not None
    for t in op.inputs:
        written = infos[t.name]
        if t.mutated and written is not None and not written.fw.mutable:
            raise TypeError(
                f"{op.name}: {t.name} must be a mutable array (the op writes it in place), got "
                f"an immutable {written.fw.name} array"
            )

    if fw.name == "torch" and not below_autograd and _needs_autograd(full):
        from .. import _torch

        return _torch.call_autograd(op, full, values, out, stream)
    attr_map = dict(zip((a.name for a in op.attrs), values, strict=True))
    metas = {
        n: None if i is None else Meta(tuple(i.shape), tuple(i.strides), i.dtype, _align(i.ptr))
        for n, i in infos.items()
    }
    a = Args(op, metas, attr_map, x.device)
    specs = op.shapes(a)
    inputs = [
        _Array(t.name, m, infos[t.name].ptr, t.mutated, None)  # type: ignore[union-attr]
        for t, m in zip(op.inputs, metas.values(), strict=True)
        if m is not None
    ]

    def arrays(outputs: Sequence[Output], out_infos: Sequence[ArrayInfo]) -> list[_Array]:
        res = list(inputs)
        for o, oi in zip(outputs, out_infos, strict=True):
            m = Meta(tuple(oi.shape), tuple(oi.strides), oi.dtype, _align(oi.ptr))
            res.append(_Array(o.name, m, oi.ptr, True, o.inplace_of))
        return res

    # The workspaces are allocated last, once the overlap rules and the launch rules have passed
    # (a rejected call allocates nothing); fresh, they overlap nothing.
    results, out_infos = _outputs(op, fw, x, lead_name, specs, out, s, hidden=False)
    check = out is not None or bool(op.mutates)
    if check:
        _check_overlaps(op, arrays(op.visible, out_infos))
    outs = {ar.name: ar.meta for ar in arrays(op.visible, out_infos)[len(inputs) :]}
    for o, sp in zip(op.outputs, specs, strict=True):
        if o.hidden:  # as allocated below: contiguous, 16-byte aligned
            outs[o.name] = Meta(sp.shape, _arrays.contiguous_strides(sp.shape), sp.dtype)
    launches = op.launch(Args(op, metas, attr_map, x.device, outs))
    if len(op.visible) != len(op.outputs):
        shown = iter(zip(results, out_infos, strict=True))
        ws = iter(zip(*_outputs(op, fw, x, lead_name, specs, out, s, hidden=True), strict=True))
        merged = [next(ws) if o.hidden else next(shown) for o in op.outputs]
        results, out_infos = [r for r, _ in merged], [i for _, i in merged]
    arrs = arrays(op.outputs, out_infos)
    prepared = _compile_launches(op, launches, x.device)
    ptrs: dict[str | None, int] = {None: 0}
    ptrs.update({ar.name: ar.ptr for ar in arrs})
    for launch, slots in prepared:
        launch(s, *[ptrs[n] for n in slots])
    if fw.name == "torch":
        _remember(op, raw, out, prepared, results, arrs, check)
    if fw.name == "torch" and stream is not None:
        for r, o in zip(results, op.outputs, strict=True):
            if o.hidden:  # workspaces die here while the kernels may still run on stream
                _arrays.torch_record_stream(r, s)
    # Outputs this call allocated go back through the framework (JAX waits for our stream).
    finished = [
        r if (out is not None and r is out) or o.hidden else fw.finish(r, s)
        for r, o in zip(results, op.outputs, strict=True)
    ]
    return finished if want_outputs else _returns(op, full, finished)


def _outputs(
    op: Op,
    fw: Any,
    x: ArrayInfo,
    x_name: str,
    specs: Sequence[OutSpec],
    out: Any,
    stream: int,
    hidden: bool,
) -> tuple[list[Any], list[ArrayInfo]]:
    """Allocate the visible outputs (or the workspaces, ``hidden``) with x's framework, or
    check the caller's ``out=``."""
    if len(specs) != len(op.outputs):
        raise AssertionError(f"{op.name}: shapes gave {len(specs)} outputs")
    visible = [i for i, o in enumerate(op.outputs) if not o.hidden]
    if out is not None and len(visible) != 1:
        raise TypeError(f"{op.name}: out= is not supported by this op")
    results: list[Any] = []
    infos: list[ArrayInfo] = []
    for i, sp in enumerate(specs):
        if op.outputs[i].hidden != hidden:
            continue
        if out is not None and i == visible[0]:
            if not fw.mutable:
                raise TypeError(
                    f"{op.name}: out= is not supported for {fw.name} arrays (they are immutable)"
                )
            info = framework_of(out, op.name, "out").info(out, op.name, "out", stream)
            if info.device != x.device:
                raise ValueError(
                    f"{op.name}: out must be on the same device as {x_name} (cuda:{x.device}), "
                    f"got cuda:{info.device}"
                )
            if info.dtype != sp.dtype:
                raise TypeError(
                    f"{op.name}: out.dtype must be {dtype_name(sp.dtype)}, got "
                    f"{dtype_name(info.dtype)}"
                )
            if tuple(info.shape) != tuple(sp.shape):
                raise ValueError(
                    f"{op.name}: out.shape must be {tuple(sp.shape)}, got {tuple(info.shape)}"
                )
            results.append(out)
            infos.append(info)
            continue
        obj = fw.empty(x, sp.shape, sp.dtype)
        if fw.name in ("torch", "cupy"):
            info = fw.info(obj, op.name, "out", stream)
        else:  # our own DLPack buffer
            info = ArrayInfo(
                obj, obj.ptr, tuple(sp.shape), _arrays.contiguous_strides(sp.shape), sp.dtype,
                x.device, fw,
            )  # fmt: skip
        results.append(obj)
        infos.append(info)
    return results, infos


def _remember(
    op: Op,
    raw: tuple[Sequence[Any], Mapping[str, Any]],
    out: Any,
    prepared: Sequence[tuple[Any, tuple[str | None, ...]]],
    results: Sequence[Any],
    arrs: Sequence[_Array],
    check: bool,
) -> None:
    """Cache this validated call shape for the torch fast path (``_Fast``)."""
    found = _torch_key(op, raw[0], raw[1], out)
    if found is None:
        return
    key = found[0]
    full = [*raw[0]] + [None] * (len(op.inputs) - len(raw[0]))
    names = [t.name for t in op.inputs] + [o.name for o in op.outputs]
    null = len(names)
    launches = tuple(
        (launch, tuple(null if n is None else names.index(n) for n in slots))
        for launch, slots in prepared
    )
    x = next(a for a in full if a is not None)
    like_x = (x.shape, x.dtype) if x.is_contiguous() else None
    allocs = tuple(
        None
        if (out is not None and r is out)
        else _LIKE_X
        if (r.shape, r.dtype) == like_x
        else (tuple(r.shape), r.dtype)
        for r in results
    )
    overlaps = []
    if check:  # the pairs _check_overlaps looks at, as offsets from the pointers
        index = {n: i for i, n in enumerate(names)}
        rows = [_rows(a.meta) for a in arrs]
        for i, w in enumerate(arrs):
            rw = rows[i]
            if not w.written or rw is None:
                continue
            for j in _partners(arrs, rows, i):
                o, ro = arrs[j], rows[j]
                assert ro is not None
                exact = _may_alias(w, o) and w.meta.strides == o.meta.strides
                overlaps.append((index[w.name], rw, index[o.name], ro, exact))
    fast = _Fast(
        launches,
        allocs,
        tuple(overlaps),
        tuple(names.index(n) for n in op.returns),
        len(op.inputs),
        tuple(len(op.inputs) + i for i, o in enumerate(op.outputs) if o.hidden),
    )
    if len(_PLANS) >= _MAX_PLANS:
        _PLANS.clear()
    with contextlib.suppress(TypeError):  # an unhashable attribute value: no fast path for it
        _PLANS[key] = fast


def rows_view(op: str, arg: str, meta: Meta) -> tuple[int, int, int]:
    """View ``meta`` as [rows, cols] with contiguous cols and one row stride (in elements).

    Contiguous arrays become one row. Otherwise the last dim must be contiguous and the leading
    dims must collapse into one row stride (e.g. ``x[:, :h]``, ``x[::2]``); anything else
    (transposed, broadcast last dim) is a ``ValueError``: we never guess at a layout.
    """
    shape, strides = meta.shape, meta.strides
    if not shape:
        return 1, 1, 1
    n = math.prod(shape)
    if n == 0:
        return 0, shape[-1], shape[-1]  # nothing to launch
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


def row_layout(op: str, arg: str, meta: Meta) -> tuple[int, int]:
    """``meta`` as rows of its last dimension: (rows, row stride in elements)."""
    shape = meta.shape
    cols = shape[-1] if shape else 1
    rows = math.prod(shape[:-1]) if shape else 1
    v_rows, v_cols, v_stride = rows_view(op, arg, meta)
    if v_rows == rows and v_cols == cols:
        return rows, v_stride
    return rows, cols  # contiguous: rows_view made one long row; split it at the last dim
