"""aotkernels' XLA FFI launch handler (one typed handler for every op)"""

from collections.abc import Sequence

from typing_extensions import CapsuleType


def set_driver(launch: int, error_name: int, tensor_map_encode: int) -> None:
    """
    Hand over the driver's entry points (addresses from cuGetProcAddress): nothing
    links libcuda.
    """

def set_kernels(name: str, per_device: Sequence[int]) -> None:
    """
    Publish the CUfunction of kernel `name` per CUDA ordinal (0: not loaded there); the
    launch handler finds kernels by the name in the custom call's `kernel` attribute.
    """

def launch_handler() -> CapsuleType:
    """
    The typed FFI handler that launches a kernel on XLA's stream, as a PyCapsule.
    """

def describe_handler() -> CapsuleType:
    """
    The host-only handler: the same decoding and pointer patching, but it writes the
    parameter block to its last result instead of launching (tests without a GPU).
    """

JAXLIB_VERSION: str
"""The jaxlib whose XLA FFI headers this module was compiled against."""

FFI_API_VERSION: tuple[int, int]
"""The XLA FFI C API version (major, minor) of those headers."""
