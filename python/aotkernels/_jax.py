"""JAX front end: every op as an XLA FFI custom call, so it works under ``jax.jit``.

One handler in C++ (``_xla``, src/xla.cpp) launches any op: the op's declaration gives the
launches (entry point, parameter fields, grid, block), this module packs each into a launch
description (the parameter block with zeros at pointer fields, which operand or result each
pointer is, the kernel of every device) and emits one ``jax.ffi.ffi_call`` per launch. At run
time the handler patches the buffers' addresses in and launches on XLA's stream: no host
synchronisation, no copies. Nothing here runs at ``import aotkernels``; jax is imported and the
target registered on the first JAX call.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DESCRIBE_TARGET", "TARGET", "LaunchDescription", "emit", "register", "xla_extension"]

TARGET = "aotkernels_launch"
DESCRIBE_TARGET = "aotkernels_describe"

_lock = threading.Lock()
_registered: set[str] = set()


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
    followed by its results, or -1 for a null pointer. ``tensor_maps`` holds 8 values per TMA
    descriptor: parameter offset, pointer-field index, CUtensorMapDataType, inner extent, outer
    extent, row bytes, box inner, box outer.
    """

    kernels: tuple[int, ...]  # the entry point's CUfunction per CUDA ordinal (0: not loaded)
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
            "kernels": np.asarray(self.kernels, dtype=np.uint64),
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
