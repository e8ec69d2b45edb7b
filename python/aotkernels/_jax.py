"""JAX front end: every op as an XLA FFI custom call, so it works under ``jax.jit``.

One handler in C++ (``_xla``, src/xla.cpp) launches any op: the op's declaration gives the
launches (entry point, parameter fields, grid, block), this module packs each into a launch
description (the kernel's name, the parameter block with zeros at pointer fields, which operand
or result each pointer is) and emits one ``jax.ffi.ffi_call`` per launch. At run time the
handler finds the kernel of the device it runs on, patches the buffers' addresses in and
launches on XLA's stream: no host synchronisation, no copies. Nothing here runs at
``import aotkernels``; jax is imported and the target registered on the first JAX call.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .arrays import contiguous_strides, dtype_name
from .dtypes import BY_LONG
from .errors import AotKernelsError

__all__ = [
    "DESCRIBE_TARGET",
    "TARGET",
    "LaunchDescription",
    "available",
    "call",
    "check_ffi_api",
    "emit",
    "installed_ffi_api",
    "lower",
    "register",
    "traced",
    "xla_extension",
]

TARGET = "aotkernels_launch"
DESCRIBE_TARGET = "aotkernels_describe"

_lock = threading.Lock()
_registered: set[str] = set()


def available() -> bool:
    """Whether this build has the XLA extension (``_xla``): ops then run on JAX arrays, eager
    or traced, as FFI custom calls."""
    try:
        from . import _xla  # noqa: F401
    except ImportError:
        return False
    return True


def traced(arrays: Sequence[Any]) -> bool:
    """Whether any of ``arrays`` is a JAX tracer (inside jit, vmap, grad...); without jax
    imported, none can be."""
    jax = sys.modules.get("jax")
    return jax is not None and any(isinstance(a, jax.core.Tracer) for a in arrays)


def xla_extension() -> Any:
    """The ``_xla`` module; ``NotImplementedError`` saying why when this build lacks it."""
    try:
        from . import _xla
    except ImportError as e:
        raise NotImplementedError(
            "aotkernels: this build has no XLA extension (aotkernels._xla), so ops cannot run "
            "under jax.jit: it is built only when jaxlib (which ships the XLA FFI headers) is "
            f"installed at build time ({e}); `aotkernels doctor` shows what the build has"
        ) from None
    return _xla


def installed_ffi_api() -> tuple[int, int] | None:
    """The XLA FFI API version (major, minor) of the installed jaxlib, read from the C header it
    ships (jax is not imported); None without jaxlib or its headers."""
    spec = importlib.util.find_spec("jaxlib")
    for loc in (spec.submodule_search_locations or []) if spec is not None else []:
        try:
            text = (Path(loc) / "include" / "xla" / "ffi" / "api" / "c_api.h").read_text()
        except OSError:
            continue
        major = re.search(r"#define XLA_FFI_API_MAJOR (\d+)", text)
        minor = re.search(r"#define XLA_FFI_API_MINOR (\d+)", text)
        if major and minor:
            return int(major[1]), int(minor[1])
    return None


def check_ffi_api(built: tuple[int, int], installed: tuple[int, int] | None) -> str | None:
    """Why XLA would refuse a handler built against FFI API ``built``, or None: XLA runs handlers
    of its own major version and its own or an older minor one."""
    if installed is None or (built[0] == installed[0] and built[1] <= installed[1]):
        return None
    return (
        f"aotkernels._xla was built against XLA FFI API {built[0]}.{built[1]}, newer than the "
        f"installed jaxlib's {installed[0]}.{installed[1]}, which refuses it: upgrade jax and "
        "jaxlib, or build aotkernels from source with this jaxlib installed"
    )


def register(target: str = TARGET) -> None:
    """Register ``target`` with JAX once per process.

    ``TARGET`` (CUDA) first hands the driver's entry points to ``_xla``; ``DESCRIBE_TARGET``
    (host) needs no driver.
    """
    if target in _registered:
        return
    with _lock:
        if target in _registered:
            return
        import jax

        xla = xla_extension()
        problem = check_ffi_api(tuple(xla.FFI_API_VERSION), installed_ffi_api())
        if problem:
            raise AotKernelsError(problem)
        if target == TARGET:
            from . import device

            cu = device.cuda_driver()
            xla.set_driver(
                *device.entry_points(
                    cu, "cuLaunchKernel", "cuGetErrorName", "cuTensorMapEncodeTiled"
                )
            )
            jax.ffi.register_ffi_target(TARGET, xla.launch_handler(), platform="CUDA")
        elif target == DESCRIBE_TARGET:
            jax.ffi.register_ffi_target(DESCRIBE_TARGET, xla.describe_handler(), platform="cpu")
        else:
            raise ValueError(f"unknown aotkernels FFI target {target!r}")
        _registered.add(target)


@dataclass(frozen=True)
class LaunchDescription:
    """One kernel launch as the FFI handler reads it (the custom call's attributes).

    ``slots[i]`` names the buffer of pointer field ``i``: an index into the call's operands
    followed by its results, or -1 for a null pointer. ``tensor_maps`` holds 18 values per TMA
    descriptor (``ops._op.pack_tensor_map``): parameter offset, pointer-field index,
    CUtensorMapDataType, rank, dims[5], byte strides[4], box[5].
    """

    kernel: str  # "family/symbol", as published to _xla (kernel_name)
    params: bytes
    ptr_offsets: tuple[int, ...]
    slots: tuple[int, ...]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int = 0
    tensor_maps: tuple[tuple[int, ...], ...] = ()

    def attributes(self) -> dict[str, Any]:
        """The custom call's attributes, typed as the handler binds them."""
        import numpy as np

        maps = [v for m in self.tensor_maps for v in m]
        return {
            "kernel": self.kernel,
            "params": np.frombuffer(self.params, dtype=np.uint8),
            "ptr_offsets": np.asarray(self.ptr_offsets, dtype=np.int64),
            "slots": np.asarray(self.slots, dtype=np.int64),
            "grid": np.asarray(self.grid, dtype=np.int64),
            "block": np.asarray(self.block, dtype=np.int64),
            "smem": np.int64(self.smem),
            "tensor_maps": np.asarray(maps, dtype=np.int64),
        }


def emit(
    desc: LaunchDescription,
    operands: Sequence[Any],
    results: Sequence[Any],
    aliases: dict[int, int] | None = None,
    target: str = TARGET,
) -> list[Any]:
    """One ``ffi_call`` of ``target``: ``results`` are ``jax.ShapeDtypeStruct`` s, ``aliases``
    maps operand indices to the result that reuses their buffer (XLA copies the operand first
    when it is still needed elsewhere, so the caller's array never changes)."""
    import jax

    register(target)
    call = jax.ffi.ffi_call(
        target,
        list(results),
        # vmap runs the call once per batch element: the description holds one element's
        # shapes, so the batched call cannot reuse it.
        vmap_method="sequential",
        input_output_aliases=aliases or None,
    )
    return list(call(*operands, **desc.attributes()))


# --- the generic lowering: an op declaration -> one ffi_call per launch ------------------------

# (op, attributes, the op's extra launch state, device) -> the jitted lowering
_eager: dict[Any, Any] = {}
_MAX_EAGER = 1024  # attributes vary without end (eps sweeps): bound the cache
_published: set[tuple[str, str]] = set()


def call(op: Any, arrays: Sequence[Any], attrs: Mapping[str, Any]) -> Any:
    """Run ``op`` on JAX arrays (one per declared input, None where an optional one is absent)
    with checked ``attrs``; returns what the op declares in ``returns``, as new arrays.

    Under a transformation (jit, vmap, ...) the op is lowered into the traced program. Eager
    calls run one jitted program per (op, attributes, device), which JAX caches per shape and
    dtype: the kernel is queued on JAX's stream like any JAX op, with no host synchronisation.
    """
    import jax

    xla_extension()  # this build's XLA extension, or the error that says it has none
    if traced(arrays):
        return lower(op, arrays, attrs, _default_device(op))
    device = _device_of(op, arrays)
    extra = None if op.cache_key is None else op.cache_key()
    key: Any = (op.name, tuple(attrs.items()), extra, device)
    try:
        fn = _eager.get(key)
    except TypeError:  # an unhashable attribute value: jit this call on its own
        fn, key = None, None
    if fn is None:
        fn = jax.jit(functools.partial(_lower_list, op, dict(attrs), device))
        if key is not None:
            if len(_eager) >= _MAX_EAGER:
                _eager.clear()
            _eager[key] = fn
    return fn(list(arrays))


def _lower_list(op: Any, attrs: dict[str, Any], device: int, arrays: list[Any]) -> Any:
    return lower(op, arrays, attrs, device)


def _device_of(op: Any, arrays: Sequence[Any]) -> int:
    """The CUDA ordinal of a concrete call's arrays (JAX checks that they agree)."""
    for t, a in zip(op.inputs, arrays, strict=True):
        if a is None:
            continue
        devices = a.devices()
        if len(devices) != 1:
            raise ValueError(
                f"{op.name}: {t.name} must be on one CUDA device, got an array sharded over "
                f"{len(devices)} devices (call the op inside jax.jit / shard_map instead)"
            )
        (d,) = devices
        if d.platform != "gpu":
            raise ValueError(f"{op.name}: {t.name} must be on a CUDA device, got one on {d}")
        return int(d.local_hardware_id)
    raise TypeError(f"{op.name}: no array argument")


def _default_device(op: Any) -> int:
    """A traced call's device: JAX's default device (the program's is not known when it is
    traced); every device's kernel is published, only the launch configuration follows it."""
    import jax

    d = getattr(jax.config, "jax_default_device", None) or jax.devices()[0]
    if isinstance(d, str):  # the option also takes a platform name
        d = jax.devices(d)[0]
    if d.platform != "gpu":
        raise NotImplementedError(
            f"{op.name}: aotkernels runs on CUDA devices only, and JAX's default device is {d}"
        )
    return int(d.local_hardware_id)


def _ours(dtype: Any) -> str:
    """Our dtype name for a JAX dtype (its own spelling when we have none: the op's shape rule
    then rejects it by name)."""
    name = str(dtype)
    return BY_LONG.get(name, name)


def _jax_dtype(dtype: str) -> Any:
    import jax.numpy as jnp

    return jnp.dtype(dtype_name(dtype))


def kernel_name(family: str, symbol: str) -> str:
    """The name a custom call launches ``symbol`` by, after publishing its CUfunction on every
    visible device to ``_xla`` (0 where the family cannot load: the handler then names the
    device). Names, not pointers, in the program: the compiled program stays valid for JAX's
    persistent compilation cache in another process, whose lowering publishes its own."""
    name = f"{family}/{symbol}"
    if (family, symbol) not in _published:
        from . import device, loader

        kernels = []
        for d in range(device.device_count()):
            try:
                kernels.append(loader.family_on(family, d).kernels.get(symbol, 0))
            except (AotKernelsError, NotImplementedError):
                kernels.append(0)
        xla_extension().set_kernels(name, kernels)
        _published.add((family, symbol))
    return name


def lower(
    op: Any,
    arrays: Sequence[Any],
    attrs: Mapping[str, Any],
    device: int,
    blocks: list[Any] | None = None,
) -> Any:
    """Emit ``op`` as one ``ffi_call`` per launch; returns what the op declares in ``returns``.

    Arrays are seen as XLA lays them out: contiguous row-major, 16-byte aligned. Inputs the op
    writes in place go in aliased to a result (XLA copies them first when they are still used,
    so the caller's arrays never change) and come back as new arrays; so do outputs that a
    later launch reads or writes again (workspaces). With ``blocks`` (a list), each launch runs
    the host-only describe handler instead, and its parameter block is appended to the list.
    """
    import jax

    from . import loader
    from .ops._op import Args, Meta

    current: dict[str, Any] = {}  # the newest value of every array, by name
    metas: dict[str, Any] = {}
    for t, a in zip(op.inputs, arrays, strict=True):
        if a is None:
            metas[t.name] = None
            continue
        shape = tuple(int(n) for n in a.shape)
        metas[t.name] = Meta(shape, contiguous_strides(shape), _ours(a.dtype), 16)
        current[t.name] = a
    specs = op.shapes(Args(op, metas, attrs, device))
    outs = {
        o.name: Meta(tuple(sp.shape), contiguous_strides(sp.shape), sp.dtype, 16)
        for o, sp in zip(op.outputs, specs, strict=True)
    }
    launches = op.launch(Args(op, metas, attrs, device, outs))
    fam = loader.family_on(op.family, device) if launches else None
    mutated = set(op.mutates)
    for ln in launches:
        assert fam is not None
        desc, operands, results, aliases, names = _describe(op, fam, ln, current, mutated, outs)
        if blocks is None:
            values = emit(desc, operands, results, aliases)
        else:
            size = _result((len(desc.params),), "uint8")
            *values, block = emit(desc, operands, [*results, size], aliases, DESCRIBE_TARGET)
            blocks.append(block)
        current.update(zip(names, values, strict=True))
    for o, sp in zip(op.outputs, specs, strict=True):
        if o.name in current or o.hidden:
            continue
        if all(sp.shape):  # only an empty output may be left unwritten
            raise AssertionError(f"{op.name}: no launch writes output {o.name!r}")
        current[o.name] = jax.numpy.zeros(sp.shape, _jax_dtype(sp.dtype))
    vals = tuple(current[n] for n in op.returns)
    return vals[0] if len(vals) == 1 else vals


def _describe(
    op: Any,
    fam: Any,
    ln: Any,
    current: Mapping[str, Any],
    mutated: set[str],
    outs: Mapping[str, Any],
) -> tuple[LaunchDescription, list[Any], list[Any], dict[int, int], list[str]]:
    """One launch's description and buffers: (description, operands, result types, aliases,
    the array name each result is the new value of)."""
    from .ops._op import pack_launch

    packed = pack_launch(fam, ln)
    operands: list[Any] = []
    results: list[Any] = []  # ShapeDtypeStructs
    result_names: list[str] = []
    aliases: dict[int, int] = {}
    where: dict[str, tuple[str, int]] = {}  # name -> ("arg" | "ret", index)
    for name in dict.fromkeys(n for n in packed.pointers if n is not None):
        if name in current:
            value = current[name]
            if name in mutated or name in outs:  # written here or read back from a launch
                aliases[len(operands)] = len(results)
                where[name] = ("ret", len(results))
                results.append(_result(value.shape, value.dtype))
                result_names.append(name)
            else:
                where[name] = ("arg", len(operands))
            operands.append(value)
        elif name in outs:
            m = outs[name]
            where[name] = ("ret", len(results))
            results.append(_result(m.shape, _jax_dtype(m.dtype)))
            result_names.append(name)
        else:
            raise AssertionError(f"{ln.symbol}: pointer field bound to unknown array {name!r}")
    slots = []
    for field in packed.pointers:
        if field is None:
            slots.append(-1)
        else:
            kind, i = where[field]
            slots.append(i if kind == "arg" else len(operands) + i)
    desc = LaunchDescription(
        kernel=kernel_name(op.family, ln.symbol),
        params=packed.params,
        ptr_offsets=tuple(fam.ptr_offsets),
        slots=tuple(slots),
        grid=_dims3(ln.grid),
        block=_dims3(ln.block),
        smem=ln.smem,
        tensor_maps=packed.tensor_maps,
    )
    return desc, operands, results, aliases, result_names


def _result(shape: Sequence[int], dtype: Any) -> Any:
    """A ``jax.ShapeDtypeStruct`` (its constructor is untyped)."""
    import jax

    make: Any = jax.ShapeDtypeStruct
    return make(tuple(shape), dtype)


def _dims3(v: Sequence[int]) -> tuple[int, int, int]:
    a, b, c = (*v, 1, 1)[:3]
    return int(a), int(b), int(c)
