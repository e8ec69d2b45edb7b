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

``image_symbols`` lists the kernels an image defines: the entry functions of a cubin's ELF
symbol table, or the ``.entry`` directives of a PTX module. The build compares them with the
plan, so a preprocessor guard that silently drops (or leaks) kernels fails the build. LZ4 is
decoded here; zstd needs Python 3.14's ``compression.zstd`` or the ``zstandard`` package (a
build requirement below 3.14), or else the toolkit's ``cuobjdump`` reads the image.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FATBIN_MAGIC",
    "FatbinError",
    "FatbinImage",
    "entry_bytes",
    "ZstdUnavailable",
    "cubin_entries",
    "cuobjdump_symbols",
    "extract_image",
    "image_payload",
    "image_symbols",
    "lz4_block_decompress",
    "pack_fatbin",
    "ptx_entries",
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


class ZstdUnavailable(FatbinError):
    """A zstd-compressed image, and neither compression.zstd nor zstandard to read it."""


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


def _lz4_length(src: bytes, i: int, nibble: int) -> tuple[int, int]:
    """A sequence length from its token nibble: 15 continues in the bytes at ``i``, each added
    until one is below 255. Returns (length, index after it)."""
    length = nibble
    if nibble == 15:
        while True:
            b = src[i]
            i += 1
            length += b
            if b != 255:
                break
    return length, i


def lz4_block_decompress(src: bytes, size: int) -> bytes:
    """Decode one raw LZ4 block (no frame) of ``size`` decoded bytes."""
    out = bytearray()
    i, n = 0, len(src)
    try:
        while i < n:
            token = src[i]
            i += 1
            lit, i = _lz4_length(src, i, token >> 4)
            if i + lit > n:
                raise IndexError
            out += src[i : i + lit]
            i += lit
            if i >= n:  # the last sequence is literals only
                break
            off = src[i] | src[i + 1] << 8
            i += 2
            match, i = _lz4_length(src, i, token & 15)
            match += 4
            if off == 0 or off > len(out):
                raise FatbinError(f"LZ4: offset {off} outside the {len(out)} bytes decoded")
            start = len(out) - off
            if off >= match:
                out += out[start : start + match]
            else:  # overlapping copy: the last `off` bytes repeat
                chunk = bytes(out[start:])
                out += (chunk * (match // off + 1))[:match]
    except IndexError:
        raise FatbinError("LZ4: block ends inside a sequence") from None
    if len(out) != size:
        raise FatbinError(f"LZ4: decoded {len(out)} bytes, header says {size}")
    return bytes(out)


def _zstd_decompress(frame: bytes, size: int) -> bytes:
    try:
        from compression import zstd  # type: ignore[import-not-found,unused-ignore]

        out: bytes = zstd.decompress(frame)
    except ImportError:
        try:
            import zstandard  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            raise ZstdUnavailable(
                "zstd-compressed image: reading it needs Python >= 3.14, the zstandard "
                "package (pip install zstandard) or the toolkit's cuobjdump on PATH"
            ) from None
        try:
            out = zstandard.ZstdDecompressor().decompress(frame, max_output_size=size)
        except zstandard.ZstdError as e:
            raise FatbinError(f"zstd: {e}") from None
    except Exception as e:  # compression.zstd.ZstdError
        raise FatbinError(f"zstd: {e}") from None
    if len(out) != size:
        raise FatbinError(f"zstd: decoded {len(out)} bytes, header says {size}")
    return out


def image_payload(data: bytes, image: FatbinImage) -> bytes:
    """The image's cubin (ELF) or PTX text, decompressed."""
    start = image.offset + image.header_size
    stored = data[start : start + image.payload_size]
    if len(stored) != image.payload_size:
        raise FatbinError("image lies outside the data")
    if image.compression is None:
        return stored
    if not 0 < image.compressed_size <= image.payload_size:
        raise FatbinError(
            f"{image.target}: compressed size {image.compressed_size} outside the payload"
        )
    body = stored[: image.compressed_size]
    if image.compression == "lz4":
        return lz4_block_decompress(body, image.uncompressed_size)
    return _zstd_decompress(body, image.uncompressed_size)


_STO_CUDA_ENTRY = 0x10  # st_other bit of a kernel (an entry point) in a cubin's symbol table
_PTX_ENTRY = re.compile(rb"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([A-Za-z_$][\w$]*)", re.M)


def cubin_entries(elf: bytes) -> set[str]:
    """Names of the kernels a cubin defines: global FUNC symbols flagged as CUDA entries."""
    if elf[:4] != b"\x7fELF" or len(elf) < 64 or elf[4] != 2 or elf[5] != 1:
        raise FatbinError("cubin: not a little-endian ELF64 file")
    shoff, _flags, _ehsize, _phentsize, _phnum, shentsize, shnum = struct.unpack_from(
        "<QIHHHHH", elf, 40
    )
    sections = []
    for k in range(shnum):
        off = shoff + k * shentsize
        if off + 64 > len(elf):
            raise FatbinError("cubin: section header outside the file")
        sections.append(struct.unpack_from("<IIQQQQIIQQ", elf, off))
    names: set[str] = set()
    for _name, stype, _f, _a, off, size, link, _info, _al, entsize in sections:
        if stype != 2:  # SHT_SYMTAB
            continue
        str_off, str_size = sections[link][4], sections[link][5]
        strtab = elf[str_off : str_off + str_size]
        for pos in range(off, off + size, entsize or 24):
            st_name, st_info, st_other = struct.unpack_from("<IBB", elf, pos)
            if st_info >> 4 != 1 or st_info & 0xF != 2 or not st_other & _STO_CUDA_ENTRY:
                continue  # not GLOBAL FUNC entry
            end = strtab.find(b"\0", st_name)
            names.add(strtab[st_name : end if end >= 0 else None].decode())
    return names


def ptx_entries(ptx: bytes) -> set[str]:
    """Names of the kernels (``.entry``) a PTX module defines."""
    return {m.group(1).decode() for m in _PTX_ENTRY.finditer(ptx)}


def image_symbols(data: bytes, image: FatbinImage) -> set[str]:
    """The kernels ``image`` of the fatbin ``data`` defines (decompressing it if need be).

    Without a zstd decoder in this Python, the toolkit's cuobjdump reads a zstd image instead.
    """
    try:
        payload = image_payload(data, image)
    except ZstdUnavailable:
        cuobjdump = shutil.which("cuobjdump")
        if cuobjdump is None:
            raise
        return cuobjdump_symbols(cuobjdump, extract_image(data, image), image.kind)
    if image.kind == "ptx":
        return ptx_entries(payload)
    return cubin_entries(payload)


_CUOBJDUMP_ENTRY = re.compile(r"^STT_FUNC\s+STB_GLOBAL\s+STO_ENTRY\s+(\S+)\s*$", re.M)


def cuobjdump_symbols(cuobjdump: str, fatbin: bytes, kind: str) -> set[str]:
    """The kernels of a one-image fatbin as ``cuobjdump`` lists them (-symbols / -ptx)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "image.fatbin"
        path.write_bytes(fatbin)
        flag = "-ptx" if kind == "ptx" else "-symbols"
        r = subprocess.run([cuobjdump, flag, str(path)], capture_output=True, check=False)
    if r.returncode != 0:
        raise FatbinError(f"{cuobjdump} {flag}: {r.stderr.decode(errors='replace').strip()}")
    if kind == "ptx":
        return ptx_entries(r.stdout)
    return set(_CUOBJDUMP_ENTRY.findall(r.stdout.decode(errors="replace")))
