"""Device detection through cuda-python, per device. Nothing here runs at import.

The first call initialises the driver (``cuInit``), hands the launch entry points to the
``_core`` extension and caches each device's compute capability, name, SM count and primary
context. Without a driver or a GPU, the first call raises ``AotKernelsError`` saying which.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from .errors import AotKernelsError

__all__ = [
    "DeviceInfo",
    "cuda_driver",
    "device_count",
    "device_info",
    "driver_version",
    "entry_points",
]


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    cc: tuple[int, int]
    sm_count: int
    context: int  # the retained primary context (CUcontext as an int)

    @property
    def cc_str(self) -> str:
        return f"{self.cc[0]}.{self.cc[1]}"


_lock = threading.Lock()
_driver: Any = None
_devices: dict[int, DeviceInfo] = {}
_count: int | None = None


def _check(cu: Any, result: tuple[Any, ...], what: str) -> Any:
    err = result[0]
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        raise AotKernelsError(f"{what} failed: {name.decode() if name else err}")
    return result[1] if len(result) == 2 else result[1:]


def cuda_driver() -> Any:
    """The initialised ``cuda.bindings.driver`` module (first call runs ``cuInit``)."""
    global _driver
    if _driver is not None:
        return _driver
    with _lock:
        if _driver is None:
            try:
                from cuda.bindings import driver as cu
            except ImportError as e:
                raise AotKernelsError(
                    f"cuda-python is not importable ({e}); install 'cuda-bindings'"
                ) from None
            try:
                (err,) = cu.cuInit(0)
            except Exception as e:  # libcuda.so.1 missing: cuda-bindings raises on first call
                raise AotKernelsError(f"no NVIDIA driver found: {e}") from None
            if err != cu.CUresult.CUDA_SUCCESS:
                raise AotKernelsError(
                    f"the NVIDIA driver failed to initialise: {err.name} "
                    "(no GPU visible, or the driver is not loaded)"
                )
            _hand_over_entry_points(cu)
            _driver = cu
    return _driver


def entry_points(cu: Any, *names: str) -> list[int]:
    """The driver's entry points ``names`` (cuGetProcAddress, CUDA 12.0 ABI) as ints."""
    flags = cu.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_LEGACY_STREAM
    ptrs = []
    for name in names:
        pfn, _status = _check(cu, cu.cuGetProcAddress(name.encode(), 12000, flags), name)
        ptrs.append(int(pfn))
    return ptrs


def _hand_over_entry_points(cu: Any) -> None:
    from . import _core

    _core.set_driver(
        *entry_points(
            cu,
            "cuLaunchKernel",
            "cuCtxGetCurrent",
            "cuCtxSetCurrent",
            "cuGetErrorName",
            "cuMemAlloc",
            "cuMemFree",
            "cuTensorMapEncodeTiled",
        )
    )
    _core.set_error_type(AotKernelsError)  # launch failures surface as AotKernelsError


def driver_version() -> tuple[int, int]:
    """The CUDA version the installed driver supports, e.g. (13, 0)."""
    cu = cuda_driver()
    v = int(_check(cu, cu.cuDriverGetVersion(), "cuDriverGetVersion"))
    return v // 1000, (v % 1000) // 10


def device_count() -> int:
    global _count
    if _count is None:
        cu = cuda_driver()
        _count = int(_check(cu, cu.cuDeviceGetCount(), "cuDeviceGetCount"))
    return _count


def device_info(index: int) -> DeviceInfo:
    """Compute capability, name, SM count and primary context of device ``index`` (cached)."""
    info = _devices.get(index)
    if info is not None:
        return info
    cu = cuda_driver()
    n = device_count()
    if not 0 <= index < n:
        raise ValueError(f"device must be in [0, {n}), got {index}")
    with _lock:
        if index not in _devices:
            dev = _check(cu, cu.cuDeviceGet(index), "cuDeviceGet")
            attr = cu.CUdevice_attribute

            def get(a: Any) -> int:
                return int(_check(cu, cu.cuDeviceGetAttribute(a, dev), "cuDeviceGetAttribute"))

            major = get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            minor = get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
            sms = get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            raw = _check(cu, cu.cuDeviceGetName(256, dev), "cuDeviceGetName")
            name = bytes(raw).split(b"\0", 1)[0].decode(errors="replace")
            ctx = _check(cu, cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            _devices[index] = DeviceInfo(index, name, (major, minor), sms, int(ctx))
    return _devices[index]
