"""The kernels inside a fatbin image, for the build's check that every image holds exactly the
planned kernels (a preprocessor guard that silently drops or leaks kernels fails the build).

``image_symbols`` lists the kernels an image defines: the entry functions of a cubin's ELF
symbol table, or the ``.entry`` directives of a PTX module. That needs the payload decompressed:
LZ4 is decoded here; zstd needs Python 3.14's ``compression.zstd`` or the ``zstandard`` package
(a build requirement below 3.14), or else the toolkit's ``cuobjdump`` reads the image.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

from ..fatbin import FatbinError, FatbinImage, extract_image

__all__ = [
    "ZstdUnavailable",
    "cubin_entries",
    "cuobjdump_symbols",
    "image_payload",
    "image_symbols",
    "lz4_block_decompress",
    "ptx_entries",
]


class ZstdUnavailable(FatbinError):
    """A zstd-compressed image, and neither compression.zstd nor zstandard to read it."""


def _lz4_length(src: bytes, i: int, nibble: int) -> tuple[int, int]:
    """A token's length field at ``src[i]``: a nibble of 15 continues in bytes until one is
    below 255. Returns (length, index after it)."""
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
