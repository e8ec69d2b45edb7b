"""
aotkernels' generic kernel launcher (driver entry points set at run time)
"""

from collections.abc import Sequence

from typing_extensions import CapsuleType


def set_driver(launch: int, ctx_get: int, ctx_set: int, error_name: int, mem_alloc: int, mem_free: int, tensor_map_encode: int) -> None:
    """
    Hand over the driver's entry points (addresses from cuGetProcAddress): nothing
    links libcuda.
    """

def set_error_type(type: type[BaseException], /) -> None:
    """
    The exception class launch failures are raised as (aotkernels.AotKernelsError).
    """

def dlpack_info(capsule: CapsuleType, /) -> tuple[int, int, int, int, int, int, tuple[int, ...], tuple[int, ...]]:
    """
    (data pointer, device type, device id, dtype code, bits, lanes, shape, strides) of an
    unconsumed DLPack capsule; strides in elements, compact row-major when it has none.
    """

def empty(ctx: int, device_id: int, shape: Sequence[int], code: int, bits: int, /) -> CapsuleType:
    """
    A fresh device buffer of `shape` in context `ctx`, as an unconsumed DLPack capsule,
    freed (cuMemFree) when the consumer drops it.
    """

class PreparedLaunch:
    """One op's launch with everything fixed but the array pointers."""

    def __init__(self, name: str, kernel: int, ctx: int, grid: Sequence[int], block: Sequence[int], smem: int, params: bytes, ptr_offsets: Sequence[int], tensor_maps: Sequence[int] = ()) -> None:
        """
        `params`: the packed parameter struct; each call patches pointers at `ptr_offsets`.
        `tensor_maps`: 18 values per TMA descriptor to re-encode around its pointer on every
        launch: param offset, pointer index, CUtensorMapDataType, rank, dims[5] (innermost
        first), byte strides[4] (of dims 1..rank-1), box[5].
        """

    def __call__(self, stream: int, /, *ptrs: int) -> None:
        """
        Patch `ptrs` (one per pointer offset, or none: the packed ones) into the parameter
        block and launch on `stream`.
        """
