"""What the installed build's toolkit implies, for the tests that read the real manifest: the
same suite runs against aotkernels-cu13 (CUDA 13.0: zstd, PTX ISA 9.0, driver floor 13.0, every
target) and aotkernels-cu12 (CUDA 12.4: LZ4, ISA 8.4, cubins from 12.0 and PTX from a 12.4
driver, no Blackwell targets)."""

from __future__ import annotations

from typing import Any

from aotkernels.select import _PTX_ISA_BY_CUDA
from aotkernels.select import parse_version as version


def compression(manifest: dict[str, Any]) -> str:
    """nvcc >= 12.8 compresses with zstd (--compress-mode=size); older ones with LZ4."""
    return "zstd" if version(manifest["toolkit"]) >= (12, 8) else "lz4"


def ptx_isa(manifest: dict[str, Any], family: str = "activation") -> tuple[int, int]:
    return version(
        next(i["ptx_isa"] for i in manifest["families"][family]["images"] if i["ptx_isa"])
    )


def driver_that_cannot_jit(isa: tuple[int, int]) -> tuple[int, int]:
    """The newest driver (CUDA version) whose JIT does not read PTX of ISA ``isa``."""
    return max(cuda for cuda, top in _PTX_ISA_BY_CUDA.items() if top < isa)


def driver_below(floor: tuple[int, int]) -> tuple[int, int]:
    """The newest known driver CUDA version below ``floor``."""
    return max(cuda for cuda in _PTX_ISA_BY_CUDA if cuda < floor)


def targets(manifest: dict[str, Any], family: str = "activation") -> set[str]:
    return {i["target"] for i in manifest["families"][family]["images"]}
