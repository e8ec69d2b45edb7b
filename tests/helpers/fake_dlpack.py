"""A fake CUDA array for CPU tests: speaks DLPack with device type CUDA, holds no memory.

Lets the CPU suite drive every validation path (dtype, shape, strides, devices) exactly as a
real CUDA array would, up to the point where a launch would need the driver.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

from aotkernels.dtypes import DTYPES

_CODES = {d.long: d.dlpack for d in DTYPES.values()}  # "bfloat16" -> (4, 16)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class FakeCudaArray:
    """``shape``/``strides`` in elements; ``ptr`` is any address (never dereferenced)."""

    def __init__(
        self,
        shape: Sequence[int],
        dtype: str = "float32",
        strides: Sequence[int] | None = None,
        device: int = 0,
        ptr: int = 0x10000,
        device_type: int = 2,
    ) -> None:
        self.shape = tuple(shape)
        self.dtype = dtype
        if strides is None:
            acc, st = 1, []
            for n in reversed(self.shape):
                st.insert(0, acc)
                acc *= n
            strides = st
        self.strides = tuple(strides)
        self.device = device
        self.ptr = ptr
        self.device_type = device_type
        self._keep: list[object] = []

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device_type, self.device

    def __dlpack__(self, stream: int | None = None) -> object:
        nd = len(self.shape)
        shape = (ctypes.c_int64 * max(nd, 1))(*self.shape)
        strides = (ctypes.c_int64 * max(nd, 1))(*self.strides)
        code, bits = _CODES[self.dtype]
        mt = _DLManagedTensor()
        mt.dl_tensor = _DLTensor(
            self.ptr,
            _DLDevice(self.device_type, self.device),
            nd,
            _DLDataType(code, bits, 1),
            shape,
            strides,
            0,
        )
        self._keep += [shape, strides, mt]  # the capsule points into these
        return _capsule_new(ctypes.addressof(mt), b"dltensor", None)
