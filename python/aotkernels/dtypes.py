"""Every dtype aotkernels knows, once: our short name and how each framework and protocol spells it.

The framework adapters (torch, DLPack, ``__cuda_array_interface__``), dtype attributes, the GEMM
op and the tests read these tables; nothing else lists dtypes. Which dtypes a family's kernels
take is the matrix's business (``[families.<name>].dtypes``, read through the manifest).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "BY_CAI",
    "BY_DLPACK",
    "BY_LONG",
    "DTYPES",
    "DType",
    "FP8",
    "ITEMSIZE",
    "LONG_NAMES",
    "split_dtype",
    "SPELLINGS",
]


class DType(NamedTuple):
    name: str  # ours: "bf16"
    long: str  # torch / NumPy / ml_dtypes / JAX: "bfloat16" (torch.bfloat16, jnp.bfloat16)
    itemsize: int
    dlpack: tuple[int, int]  # (type code, bits): 0 int, 2 float, 4 bfloat, 10 / 12 fp8 (DLPack 1.1)
    cai: str | None  # __cuda_array_interface__ typestr, where the protocol has one
    tma: int  # CUtensorMapDataType of TMA copies (8-bit types move as UINT8 = 0)
    # Extra spellings a dtype attribute (out_dtype=...) accepts; None: not accepted there.
    aliases: tuple[str, ...] | None


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("f32", "float32", 4, (2, 32), "<f4", 7, ("float",)),
        DType("f16", "float16", 2, (2, 16), "<f2", 6, ("half",)),
        DType("bf16", "bfloat16", 2, (4, 16), None, 9, ()),
        DType("int8", "int8", 1, (0, 8), "|i1", 0, ()),
        DType("fp8_e4m3", "float8_e4m3fn", 1, (10, 8), None, 0, ()),
        DType("fp8_e5m2", "float8_e5m2", 1, (12, 8), None, 0, ()),
        DType("int32", "int32", 4, (0, 32), "<i4", 3, ("int",)),
        DType("f64", "float64", 8, (2, 64), "<f8", 8, None),
        DType("int64", "int64", 8, (0, 64), "<i8", 5, None),
    )
}

LONG_NAMES = {d.name: d.long for d in DTYPES.values()}  # "bf16" -> "bfloat16"
BY_LONG = {d.long: d.name for d in DTYPES.values()}  # "bfloat16" -> "bf16"
ITEMSIZE = {d.name: d.itemsize for d in DTYPES.values()}
BY_DLPACK = {d.dlpack: d.name for d in DTYPES.values()}
BY_CAI = {d.cai: d.name for d in DTYPES.values() if d.cai is not None}
FP8 = tuple(d.name for d in DTYPES.values() if d.name.startswith("fp8_"))
# Every spelling of a dtype attribute, by name: ours, the long name, the aliases.
SPELLINGS = {
    s: d.name
    for d in DTYPES.values()
    if d.aliases is not None
    for s in (d.long, d.name, *d.aliases)
}


def split_dtype(name: str) -> tuple[str, ...]:
    """The storage dtypes of an entry's dtype: ``"f16"`` -> ``("f16",)``; a mixed-operand name
    ``"<a>x<b>"`` (op_dtypes, e.g. ``"fp8_e4m3xfp8_e5m2"``) -> ``(a, b)``."""
    return tuple(name.split("x")) if "x" in name else (name,)
