"""Pure-Python reader for CUDA fatbin containers (no cuobjdump needed).

A fatbin is a 16-byte container header followed by entries, each an entry header and a payload:

container: u32 magic 0xBA55ED50 | u16 version | u16 header size | u64 size of all entries
entry:     u16 kind (1 PTX, 2 cubin) | u16 version | u32 header size | u64 payload size
           | u32 compressed size @16 | u16 minor, u16 major @24 (PTX ISA for PTX entries)
           | u32 arch @28 (75, 90, 120, ...) | u64 flags @40 | u64 uncompressed size @56

Flag bits used here (read off nvcc 13.0 output): 0x2000 LZ4-compressed, 0x8000
zstd-compressed, 0x100000 arch-specific (``sm_90a``), 0x200000 family-specific (``sm_100f``).
A compressed payload is one zstd frame (nvcc >= 12.8, ``--compress-mode``) or one raw LZ4 block
(``-Xfatbin=-compress-all``), ``compressed size @16`` bytes long, then padding.

The run time only reads headers and cuts one image out (``extract_image``): the driver
decompresses it. Reading the kernels inside an image is build-time work (``_build.symbols``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "FATBIN_MAGIC",
    "FatbinError",
    "FatbinImage",
    "entry_bytes",
    "extract_image",
    "pack_fatbin",
    "read_fatbin",
]

FATBIN_MAGIC = 0xBA55ED50
_CONTAINER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")  # 64 bytes
_KIND = {1: "ptx", 2: "cubin"}
_FLAG_LZ4 = 0x2000
_FLAG_ZSTD = 0x8000
_FLAG_ARCH_SPECIFIC = 0x100000
_FLAG_FAMILY_SPECIFIC = 0x200000


class FatbinError(ValueError):
    """The bytes are not a well-formed fatbin."""


@dataclass(frozen=True)
class FatbinImage:
    """One entry of a fatbin: a cubin for one target or a PTX module."""

    kind: str  # "cubin" | "ptx"
    arch: int  # 75, 90, 100, 120, ...
    variant: str  # "", "a" or "f"
    compression: str | None  # None, "zstd" or "lz4"
    version: tuple[int, int]  # PTX ISA (major, minor) for PTX; the ELF format version for cubins
    offset: int  # of the entry header within the file
    header_size: int
    payload_size: int  # bytes as stored (padded)
    uncompressed_size: int
    flags: int
    compressed_size: int = 0  # bytes of the zstd frame / LZ4 block (0 when not compressed)

    @property
    def compressed(self) -> bool:
        return self.compression is not None

    @property
    def target(self) -> str:
        """``sm_90a`` for a cubin, ``compute_120`` for PTX (as nvcc's -gencode spells them)."""
        if self.kind == "ptx":
            return f"compute_{self.arch}{self.variant}"
        return f"sm_{self.arch}{self.variant}"

    @property
    def cc(self) -> tuple[int, int]:
        return divmod(self.arch, 10)

    @property
    def ptx_isa(self) -> str | None:
        return f"{self.version[0]}.{self.version[1]}" if self.kind == "ptx" else None

    @property
    def stored_bytes(self) -> int:
        return self.header_size + self.payload_size


def read_fatbin(data: bytes) -> list[FatbinImage]:
    """List every entry of a fatbin, in file order. Raises ``FatbinError`` on malformed data."""
    if len(data) < _CONTAINER.size:
        raise FatbinError(f"too short for a fatbin header: {len(data)} bytes")
    magic, _version, hsize, size = _CONTAINER.unpack_from(data, 0)
    if magic != FATBIN_MAGIC:
        raise FatbinError(f"bad magic: expected 0x{FATBIN_MAGIC:08X}, got 0x{magic:08X}")
    end = hsize + size
    if end > len(data):
        raise FatbinError(f"truncated: header says {end} bytes, file has {len(data)}")
    images = []
    off = hsize
    while off < end:
        if off + _ENTRY.size > end:
            raise FatbinError(f"truncated entry header at offset {off}")
        (kind, _ev, ehsize, psize, csize, _opt, minor, major, arch, _no, _nl, flags, _z, usize) = (
            _ENTRY.unpack_from(data, off)
        )
        if kind not in _KIND:
            raise FatbinError(f"unknown entry kind {kind} at offset {off}")
        if ehsize < _ENTRY.size or off + ehsize + psize > end:
            raise FatbinError(f"entry at offset {off} overruns the container")
        variant = (
            "a" if flags & _FLAG_ARCH_SPECIFIC else "f" if flags & _FLAG_FAMILY_SPECIFIC else ""
        )
        compression = "zstd" if flags & _FLAG_ZSTD else "lz4" if flags & _FLAG_LZ4 else None
        images.append(
            FatbinImage(
                kind=_KIND[kind],
                arch=arch,
                variant=variant,
                compression=compression,
                version=(major, minor),
                offset=off,
                header_size=ehsize,
                payload_size=psize,
                uncompressed_size=usize if compression else psize,
                flags=flags,
                compressed_size=csize if compression else 0,
            )
        )
        off += ehsize + psize
    return images


def entry_bytes(data: bytes, image: FatbinImage) -> bytes:
    """The stored bytes (entry header + payload, still compressed) of ``image`` in ``data``."""
    entry = data[image.offset : image.offset + image.stored_bytes]
    if len(entry) != image.stored_bytes:
        raise FatbinError("image lies outside the data")
    return entry


def pack_fatbin(entries: Iterable[bytes]) -> bytes:
    """A fatbin container around stored entries (from ``entry_bytes``), in the given order."""
    body = b"".join(entries)
    return _CONTAINER.pack(FATBIN_MAGIC, 1, _CONTAINER.size, len(body)) + body


def extract_image(data: bytes, image: FatbinImage) -> bytes:
    """A standalone fatbin holding only ``image``, still compressed: the driver unpacks it.

    Loading this instead of the whole fatbin makes the driver run exactly the image the
    dispatcher chose, rather than its own pick.
    """
    return pack_fatbin([entry_bytes(data, image)])
