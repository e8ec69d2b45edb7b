"""Framework adapters: any CUDA array in, the caller's framework out, on the caller's stream.

An adapter reads an array's pointer, shape, strides (in elements), dtype and device without
copying, allocates outputs with the framework's own allocator (torch, CuPy) or through DLPack
(JAX and other DLPack / ``__cuda_array_interface__`` producers), and names the framework's
current stream. Adapters are chosen once per array type and cached.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from .dtypes import BY_CAI, BY_DLPACK, BY_LONG, DTYPES, ITEMSIZE, LONG_NAMES

__all__ = [
    "ITEMSIZE",
    "LONG_NAMES",
    "TORCH_TYPES",
    "ArrayInfo",
    "DeviceBuffer",
    "contiguous_strides",
    "Framework",
    "dtype_name",
    "framework_of",
    "stream_handle",
]


_KDLCUDA = 2
_DLPACK_DEVICES = {
    1: "cpu",
    2: "cuda",
    3: "cuda_host",
    4: "opencl",
    7: "vulkan",
    8: "metal",
    10: "rocm",
    13: "cuda_managed",
    14: "oneapi",
}


# Filled when the torch adapter is first made: the op layer's fast path for torch tensors.
TORCH_TYPES: set[type] = set()
torch_stream: Any = None  # torch._C._cuda_getCurrentRawStream
torch_grad_enabled: Any = None  # torch.is_grad_enabled
torch_empty_like: Any = None  # torch.empty_like


def torch_record_stream(t: Any, stream: int) -> None:
    """Keep ``t``'s memory from reuse until work queued so far on ``stream`` is done: the
    caching allocator only tracks torch's own streams."""
    import torch

    t.record_stream(torch.cuda.ExternalStream(stream, device=t.device))


class DeviceBuffer:
    """A device allocation of ours exported through DLPack (outputs for JAX and DLPack inputs).

    Holds an unconsumed "dltensor" capsule; the consumer takes it once through ``__dlpack__``.
    """

    def __init__(self, capsule: Any, device: int, ptr: int) -> None:
        self._capsule = capsule
        self.device = device
        self.ptr = ptr

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_KDLCUDA, self.device)

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        if self._capsule is None:
            raise BufferError("DeviceBuffer: the DLPack capsule was already consumed")
        cap, self._capsule = self._capsule, None
        return cap


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides, in elements, of a compact array of ``shape``."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def dtype_name(dt: str) -> str:
    """``"bf16"`` -> ``"bfloat16"`` for messages; other spellings pass through."""
    return LONG_NAMES.get(dt, dt)


class ArrayInfo(NamedTuple):
    obj: Any
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    dtype: str  # our name (f32, bf16, ...) or the framework's spelling when we have none
    device: int  # CUDA ordinal
    fw: Framework


class Framework:
    """Base adapter; one subclass per framework family."""

    name = "dlpack"
    mutable = True

    def info(self, x: Any, op: str, arg: str, stream: int) -> ArrayInfo:
        raise NotImplementedError

    def current_stream(self, device: int) -> int:
        return 0  # the legacy default stream

    def empty(self, like: ArrayInfo, shape: Sequence[int], dtype: str) -> Any:
        from . import _core, device

        ctx = device.device_info(like.device).context
        code, bits = DTYPES[dtype].dlpack
        cap = _core.empty(ctx, like.device, list(shape), code, bits)
        return DeviceBuffer(cap, like.device, _core.dlpack_info(cap)[0])

    def finish(self, out: Any, stream: int) -> Any:
        return out


def _not_cuda(op: str, arg: str, where: str) -> ValueError:
    return ValueError(f"{op}: {arg} must be on a CUDA device, got an array on {where}")


class _Torch(Framework):
    name = "torch"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.to_ours = {getattr(torch, d.long): d.name for d in DTYPES.values()}
        self.to_torch = {v: k for k, v in self.to_ours.items()}
        self._stream = torch._C._cuda_getCurrentRawStream
        global torch_stream, torch_grad_enabled, torch_empty_like
        torch_stream = self._stream
        torch_grad_enabled = torch.is_grad_enabled
        torch_empty_like = torch.empty_like
        TORCH_TYPES.add(torch.Tensor)
        TORCH_TYPES.add(torch.nn.Parameter)

    def info(self, x: Any, op: str, arg: str, stream: int) -> ArrayInfo:
        dev = x.get_device()
        if dev < 0:
            raise _not_cuda(op, arg, str(x.device))
        dt = self.to_ours.get(x.dtype) or str(x.dtype).removeprefix("torch.")
        return ArrayInfo(x, x.data_ptr(), tuple(x.shape), x.stride(), dt, dev, self)

    def current_stream(self, device: int) -> int:
        return int(self._stream(device))

    def empty(self, like: ArrayInfo, shape: Sequence[int], dtype: str) -> Any:
        x = like.obj
        if tuple(shape) == tuple(x.shape) and dtype == like.dtype and x.is_contiguous():
            return self.torch.empty_like(x)  # ~1 us cheaper than new_empty
        return x.new_empty(shape, dtype=self.to_torch[dtype])


class _CuPy(Framework):
    name = "cupy"

    def __init__(self) -> None:
        import cupy

        self.cupy = cupy

    def info(self, x: Any, op: str, arg: str, stream: int) -> ArrayInfo:
        item = x.itemsize
        strides = tuple(s // item for s in x.strides)
        if any(s % item for s in x.strides):
            raise ValueError(
                f"{op}: {arg} strides must be multiples of the item size, got {x.strides}"
            )
        dt = BY_LONG.get(x.dtype.name, x.dtype.name)
        return ArrayInfo(x, x.data.ptr, x.shape, strides, dt, x.device.id, self)

    def current_stream(self, device: int) -> int:
        with self.cupy.cuda.Device(device):
            return int(self.cupy.cuda.get_current_stream().ptr)

    def empty(self, like: ArrayInfo, shape: Sequence[int], dtype: str) -> Any:
        with self.cupy.cuda.Device(like.device):
            return self.cupy.empty(tuple(shape), dtype=LONG_NAMES[dtype])


class _DLPack(Framework):
    """JAX and any other ``__dlpack__`` producer."""

    def info(self, x: Any, op: str, arg: str, stream: int) -> ArrayInfo:
        from . import _core

        dev_type, _ = x.__dlpack_device__()
        if dev_type != _KDLCUDA:
            raise _not_cuda(op, arg, _DLPACK_DEVICES.get(dev_type, f"DLPack device {dev_type}"))
        # stream=: the producer makes the data ready on our stream (1 = legacy default stream).
        cap = x.__dlpack__(stream=stream or 1)
        ptr, _t, dev, code, bits, lanes, shape, strides = _core.dlpack_info(cap)
        dt = BY_DLPACK.get((code, bits)) if lanes == 1 else None
        return ArrayInfo(
            x, ptr, shape, strides, dt or f"dlpack(code={code}, bits={bits})", dev, self
        )


class _Jax(_DLPack):
    name = "jax"
    mutable = False  # JAX arrays are immutable: no out=

    def finish(self, out: Any, stream: int) -> Any:
        import jax.dlpack

        from . import device

        # JAX reads the result on its own streams, which do not wait for ours.
        cu = device.cuda_driver()
        cu.cuStreamSynchronize(stream)
        return jax.dlpack.from_dlpack(out)


class _CudaArrayInterface(Framework):
    """numba, cuda.core and other ``__cuda_array_interface__`` producers."""

    name = "cuda_array_interface"

    def info(self, x: Any, op: str, arg: str, stream: int) -> ArrayInfo:
        from . import device

        cai = x.__cuda_array_interface__
        ptr = int(cai["data"][0])
        shape = tuple(cai["shape"])
        dt = BY_CAI.get(cai["typestr"], cai["typestr"])
        item = int(cai["typestr"][2:])
        if cai.get("strides") is None:
            strides = contiguous_strides(shape)
        else:
            strides = tuple(b // item for b in cai["strides"])
        cu = device.cuda_driver()
        if cai.get("stream") not in (None, stream):
            cu.cuStreamSynchronize(cai["stream"])  # the protocol's producer-stream handshake
        dev = 0
        if ptr:
            attr = cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
            err, dev = cu.cuPointerGetAttribute(attr, ptr)
            if err != cu.CUresult.CUDA_SUCCESS:
                raise _not_cuda(op, arg, "host memory")
        return ArrayInfo(x, ptr, shape, strides, dt, int(dev), self)


_cache: dict[type, Framework] = {}


def framework_of(x: Any, op: str, arg: str) -> Framework:
    """The adapter for ``x``'s type; ``TypeError`` if ``x`` is not an array we can read."""
    t = type(x)
    fw = _cache.get(t)
    if fw is None:
        mod = t.__module__.split(".", 1)[0]
        if mod == "torch":
            fw = _Torch()
        elif mod == "cupy":
            fw = _CuPy()
        elif mod in ("jax", "jaxlib"):
            fw = _Jax()
        elif hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
            fw = _DLPack()
        elif hasattr(x, "__cuda_array_interface__"):
            fw = _CudaArrayInterface()
        else:
            raise TypeError(
                f"{op}: {arg} must be a CUDA array (torch, CuPy, JAX, or any object with "
                f"__dlpack__ or __cuda_array_interface__), got {t.__module__}.{t.__qualname__}"
            )
        _cache[t] = fw
    return fw


def stream_handle(stream: Any) -> int:
    """An int handle from ``stream=``: an int, ``__cuda_stream__``, torch or CuPy streams."""
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    for attr in ("cuda_stream", "ptr", "handle"):
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    raise TypeError(
        f"stream must be an int handle or an object with __cuda_stream__, got {type(stream)}"
    )
