"""The pure-Python fatbin reader against real nvcc output, the installed build and bad data;
the manifest's check of fatbins against the plan."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aotkernels._build import symbols
from aotkernels._build.manifest_writer import check_fatbin, write_manifest
from aotkernels._build.matrix import load_matrix
from aotkernels._build.plan import _image_condition, entry_json, make_plan, param_layout
from aotkernels._build.symbols import image_symbols, lz4_block_decompress
from aotkernels.fatbin import FATBIN_MAGIC, FatbinError, FatbinImage, extract_image, read_fatbin
from aotkernels.manifest import ManifestError, image_record, load_manifest
from aotkernels.select import parse_version
from conftest import ROOT
from helpers import variant

KERNEL = r"""
extern "C" __global__ void ak_test_scale(float* y, const float* x, float a, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i];
}
"""
GENCODE = [
    "-gencode=arch=compute_75,code=sm_75",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90a,code=sm_90a",
    "-gencode=arch=compute_100f,code=sm_100f",
    "-gencode=arch=compute_120a,code=sm_120a",
    "-gencode=arch=compute_75,code=compute_75",
]
EXPECTED = [
    ("cubin", 75, ""),
    ("cubin", 90, ""),
    ("cubin", 90, "a"),
    ("cubin", 100, "f"),
    ("cubin", 120, "a"),
    ("ptx", 75, ""),
]
EXPECTED_TARGETS = {"sm_75", "sm_90", "sm_90a", "sm_100f", "sm_120a", "compute_75"}

# PTX ISA version that each CUDA toolkit release emits (PTX ISA release notes).
PTX_ISA_OF_TOOLKIT = {
    (12, 8): "8.7",
    (12, 9): "8.8",
    (13, 0): "9.0",
    (13, 1): "9.1",
}


def nvcc_release(nvcc: str) -> tuple[int, int]:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"release (\d+)\.(\d+)", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


@pytest.fixture(scope="module")
def toolkit(nvcc: str) -> tuple[int, int]:
    release = nvcc_release(nvcc)
    if release < (12, 9):
        pytest.skip(f"nvcc {release} cannot build sm_100f (needs 12.9)")
    return release


def _build(nvcc: str, out_dir: Path, compress: str) -> bytes:
    src = out_dir / "scale.cu"
    src.write_text(KERNEL)
    out = out_dir / f"scale_{compress}.fatbin"
    subprocess.run(
        [nvcc, "--fatbin", "-o", str(out), str(src), f"--compress-mode={compress}", *GENCODE],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out.read_bytes()


@pytest.fixture(scope="module")
def built(nvcc: str, toolkit: tuple[int, int], tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return _build(nvcc, tmp_path_factory.mktemp("fatbin"), "size")


@pytest.fixture(scope="module")
def built_plain(
    nvcc: str, toolkit: tuple[int, int], tmp_path_factory: pytest.TempPathFactory
) -> bytes:
    return _build(nvcc, tmp_path_factory.mktemp("fatbin_plain"), "none")


def _check_layout(data: bytes, images: list[FatbinImage]) -> None:
    """Entries are back to back from byte 16 to the end of the file."""
    magic, _, hsize, size = struct.unpack_from("<IHHQ", data)
    assert magic == FATBIN_MAGIC
    assert hsize == 16 and hsize + size == len(data)
    off = hsize
    for img in images:
        assert img.offset == off
        off += img.stored_bytes
    assert off == len(data)


# --- (a) a real nvcc build -------------------------------------------------------------------


def test_real_build_lists_every_image(built: bytes, toolkit: tuple[int, int]) -> None:
    images = read_fatbin(built)
    assert sorted((i.kind, i.arch, i.variant) for i in images) == sorted(EXPECTED)
    assert {i.target for i in images} == EXPECTED_TARGETS
    by_target = {i.target: i for i in images}
    assert by_target["sm_90a"].variant == "a" and by_target["sm_90"].variant == ""
    assert by_target["sm_100f"].variant == "f" and by_target["sm_100f"].cc == (10, 0)
    assert by_target["sm_120a"].variant == "a" and by_target["sm_120a"].cc == (12, 0)
    assert by_target["compute_75"].kind == "ptx" and by_target["compute_75"].cc == (7, 5)
    _check_layout(built, images)


def test_real_build_compression_and_ptx_isa(built: bytes, toolkit: tuple[int, int]) -> None:
    images = read_fatbin(built)
    for img in images:
        assert img.compression == "zstd", img
        assert img.compressed
        assert img.uncompressed_size > img.payload_size, img
    ptx = [i for i in images if i.kind == "ptx"]
    assert len(ptx) == 1
    if toolkit not in PTX_ISA_OF_TOOLKIT:
        pytest.skip(f"PTX ISA of CUDA {toolkit} not in the test's table")
    assert ptx[0].ptx_isa == PTX_ISA_OF_TOOLKIT[toolkit]
    assert all(i.ptx_isa is None for i in images if i.kind == "cubin")


def test_real_build_uncompressed(
    built_plain: bytes, built: bytes, toolkit: tuple[int, int]
) -> None:
    images = read_fatbin(built_plain)
    assert sorted((i.kind, i.arch, i.variant) for i in images) == sorted(EXPECTED)
    for img in images:
        assert img.compression is None and not img.compressed
        assert img.uncompressed_size == img.payload_size
    _check_layout(built_plain, images)
    # the same images, compressed, are smaller
    zipped = {i.target: i for i in read_fatbin(built)}
    for img in images:
        assert zipped[img.target].payload_size < img.payload_size
        # a payload may be padded: the compressed one records the real size
        assert zipped[img.target].uncompressed_size <= img.payload_size


# --- (b) the installed build -----------------------------------------------------------------


def test_installed_fatbins_match_manifest(installed_kernels: Path) -> None:
    manifest = load_manifest(installed_kernels)
    assert manifest["families"], "the installed build has no families"
    for name, fam in manifest["families"].items():
        assert fam["file"] == f"{name}.fatbin"
        data = (installed_kernels / fam["file"]).read_bytes()
        assert len(data) == fam["bytes"], name
        assert hashlib.sha256(data).hexdigest() == fam["sha256"], name
        images = read_fatbin(data)
        _check_layout(data, images)
        assert [image_record(i) for i in images] == fam["images"], name
        for img, rec in zip(images, fam["images"], strict=True):
            assert rec["kind"] == img.kind and rec["target"] == img.target
            assert rec["variant"] == img.variant
            assert rec["compressed"] is True and rec["compression"] == variant.compression(manifest)
            assert rec["bytes"] == img.stored_bytes
            if img.kind == "ptx":
                assert img.ptx_isa is not None and rec["ptx_isa"] == img.ptx_isa
        isas = {r["ptx_isa"] for r in fam["images"] if r["kind"] == "ptx"}
        assert len(isas) <= 1, name
    # no fatbin outside the manifest
    assert {p.stem for p in installed_kernels.glob("*.fatbin")} == set(manifest["families"])


def test_installed_images_are_what_the_matrix_promised(installed_kernels: Path) -> None:
    manifest = load_manifest(installed_kernels)
    matrix = load_matrix(installed_kernels.parent / "arch_matrix.toml", check_sources=False)
    plan = make_plan(
        matrix, parse_version(manifest["toolkit"]), manifest["archs"], manifest["families_filter"]
    )
    assert set(plan.families) == set(manifest["families"])
    assert manifest["targets"] == {n: t.cc_str for n, t in matrix.targets.items()}
    for name, fp in plan.families.items():
        fam = manifest["families"][name]
        found = sorted((r["kind"], r["arch"], r["variant"]) for r in fam["images"])
        assert found == sorted(fp.expected_images()), name
        assert fam["entries"] == [entry_json(e) for e in fp.entries()]
        assert [list(p) for p in fp.family.params] == fam["params"]
        fmt, _, offsets = param_layout(fp.family.params)
        assert fam["param_format"] == fmt and fam["param_offsets"] == dict(offsets), name


# --- (c) malformed data ----------------------------------------------------------------------


def _container(entries: bytes, size: int | None = None) -> bytes:
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(entries) if size is None else size) + (
        entries
    )


def test_bad_magic(built: bytes) -> None:
    bad = struct.pack("<I", 0x7F454C46) + built[4:]
    with pytest.raises(FatbinError, match="bad magic: expected 0xBA55ED50, got 0x7F454C46"):
        read_fatbin(bad)


def test_too_short() -> None:
    with pytest.raises(FatbinError, match="too short for a fatbin header: 8 bytes"):
        read_fatbin(struct.pack("<IHH", FATBIN_MAGIC, 1, 16))
    with pytest.raises(FatbinError, match="too short"):
        read_fatbin(b"")


def test_truncated_file(built: bytes) -> None:
    with pytest.raises(FatbinError, match=rf"truncated: header says {len(built)} bytes, file has"):
        read_fatbin(built[:-100])


def test_truncated_entry_header() -> None:
    with pytest.raises(FatbinError, match="truncated entry header at offset 16"):
        read_fatbin(_container(b"\x00" * 40))


def test_entry_overruns_container(built: bytes) -> None:
    bad = bytearray(built)
    first = read_fatbin(built)[0]
    struct.pack_into("<Q", bad, first.offset + 8, len(built))  # payload size past the end
    with pytest.raises(FatbinError, match=rf"entry at offset {first.offset} overruns"):
        read_fatbin(bytes(bad))


def test_entry_header_size_too_small(built: bytes) -> None:
    bad = bytearray(built)
    second = read_fatbin(built)[1]
    struct.pack_into("<I", bad, second.offset + 4, 8)
    with pytest.raises(FatbinError, match=rf"entry at offset {second.offset} overruns"):
        read_fatbin(bytes(bad))


def test_unknown_entry_kind(built: bytes) -> None:
    bad = bytearray(built)
    struct.pack_into("<H", bad, 16, 7)
    with pytest.raises(FatbinError, match="unknown entry kind 7 at offset 16"):
        read_fatbin(bytes(bad))


def test_empty_container_has_no_images() -> None:
    assert read_fatbin(_container(b"")) == []


# --- (d) extract_image -----------------------------------------------------------------------


def test_extract_image_gives_a_single_entry_fatbin(built: bytes) -> None:
    images = read_fatbin(built)
    for img in images:
        single = extract_image(built, img)
        (only,) = read_fatbin(single)
        assert (only.kind, only.arch, only.variant, only.target) == (
            img.kind,
            img.arch,
            img.variant,
            img.target,
        )
        assert only.compression == img.compression and only.version == img.version
        assert only.flags == img.flags
        assert only.payload_size == img.payload_size
        assert only.uncompressed_size == img.uncompressed_size
        assert only.offset == 16
        assert single[16:] == built[img.offset : img.offset + img.stored_bytes]
        _check_layout(single, [only])


def test_extract_image_outside_data(built: bytes) -> None:
    img = read_fatbin(built)[-1]
    with pytest.raises(FatbinError, match="outside the data"):
        extract_image(built[: img.offset + 10], img)


# --- (e) manifest checks ---------------------------------------------------------------------


def test_check_fatbin_accepts_exact_images(built: bytes) -> None:
    images = check_fatbin("scale", built, [list(e) for e in reversed(EXPECTED)])
    assert len(images) == len(EXPECTED)


def test_check_fatbin_missing_image(built: bytes) -> None:
    want = [*EXPECTED, ("cubin", 86, "")]
    with pytest.raises(ManifestError, match=r"^scale: fatbin images differ from the plan") as info:
        check_fatbin("scale", built, want)
    assert "missing [('cubin', 86, '')]" in str(info.value)
    assert "unexpected []" in str(info.value)


def test_check_fatbin_unexpected_image(built: bytes) -> None:
    want = [e for e in EXPECTED if e != ("cubin", 90, "a")]
    with pytest.raises(ManifestError, match=r"^scale: .*unexpected \[\('cubin', 90, 'a'\)\]"):
        check_fatbin("scale", built, want)


def test_check_fatbin_variant_matters(built: bytes) -> None:
    want = [("cubin", 100, "a") if e == ("cubin", 100, "f") else e for e in EXPECTED]
    with pytest.raises(ManifestError, match=r"^scale: .*missing \[\('cubin', 100, 'a'\)\]"):
        check_fatbin("scale", built, want)


def test_check_fatbin_uncompressed(built_plain: bytes) -> None:
    with pytest.raises(ManifestError, match=r"^scale: images not compressed: \['compute_75'"):
        check_fatbin("scale", built_plain, EXPECTED)
    assert len(check_fatbin("scale", built_plain, EXPECTED, compressed=False)) == 6


def _plan_family(images: list[tuple[str, int, str]]) -> dict[str, Any]:
    return {
        "images": [list(i) for i in images],
        "entries": [{"symbol": "ak_test_scale", "op": "scale", "dtype": "f32"}],
        "params": [["y", "ptr"], ["x", "ptr"], ["a", "f32"], ["n", "i64"]],
        "param_format": "<QQfxxxxq",
        "param_bytes": 32,
        "param_offsets": {"y": 0, "x": 8, "a": 16, "n": 24},
        "skipped": [],
        "dtypes": ["f32"],
        "op_dtypes": {"scale": ["f32"]},
        "constants": {"flags": {"add": 1}, "threads": 256},
    }


def test_write_manifest(built: bytes, tmp_path: Path) -> None:
    src = tmp_path / "obj" / "scale.fatbin"
    src.parent.mkdir()
    src.write_bytes(built)
    out = tmp_path / "kernels"
    out.mkdir()
    (out / "stale.fatbin").write_bytes(b"old")
    plan = {
        "archs": "75;90",
        "families_filter": None,
        "targets": {"sm_75": "7.5", "sm_90": "9.0"},
        "constants": {"rowwise": {"max_threads": 1024}},
        "families": {"scale": _plan_family(EXPECTED)},
    }
    man = write_manifest(
        plan,
        {"scale": src},
        out,
        toolkit="13.0.88",
        package_version="9.9",
        toolkit_origin="PyPI nvidia-cuda-nvcc==13.0.88",
    )
    assert not (out / "stale.fatbin").exists()
    assert (out / "scale.fatbin").read_bytes() == built
    on_disk = load_manifest(out)
    assert on_disk == json.loads(json.dumps(man))
    assert on_disk["toolkit"] == "13.0" and on_disk["driver_floor"] == "13.0"
    assert on_disk["toolkit_origin"] == "PyPI nvidia-cuda-nvcc==13.0.88"
    assert on_disk["archs"] == "75;90" and on_disk["package_version"] == "9.9"
    fam = on_disk["families"]["scale"]
    assert fam["sha256"] == hashlib.sha256(built).hexdigest() and fam["bytes"] == len(built)
    assert [r["target"] for r in fam["images"]] == [i.target for i in read_fatbin(built)]
    assert fam["param_bytes"] == 32
    assert fam["param_offsets"] == {"y": 0, "x": 8, "a": 16, "n": 24}
    assert on_disk["targets"] == {"sm_75": "7.5", "sm_90": "9.0"}
    assert on_disk["constants"] == {"rowwise": {"max_threads": 1024}}
    assert fam["constants"] == {"flags": {"add": 1}, "threads": 256}
    assert fam["dtypes"] == ["f32"] and fam["op_dtypes"] == {"scale": ["f32"]}


def test_write_manifest_rejects_a_fatbin_that_differs(built: bytes, tmp_path: Path) -> None:
    src = tmp_path / "scale.fatbin"
    src.write_bytes(built)
    plan = {"families": {"scale": _plan_family(EXPECTED[:-1])}}
    with pytest.raises(ManifestError, match=r"^scale: fatbin images differ from the plan"):
        write_manifest(plan, {"scale": src}, tmp_path / "out", toolkit="13.0", package_version="0")
    assert not (tmp_path / "out" / "manifest.json").exists()
    with pytest.raises(ManifestError, match=r"^other: the plan has this family but no fatbin"):
        write_manifest(
            {"families": {"other": _plan_family(EXPECTED)}},
            {"scale": src},
            tmp_path / "out",
            toolkit="13.0",
            package_version="0",
        )


def test_load_manifest_errors(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=re.escape(f"{tmp_path / 'manifest.json'}: missing")):
        load_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(ManifestError, match=re.escape(f"{tmp_path / 'manifest.json'}: unreadable")):
        load_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text('{"format": 1}')
    with pytest.raises(ManifestError, match=r"format 1, this aotkernels reads 3"):
        load_manifest(tmp_path)


# --- (f) the kernels of each image against the plan ------------------------------------------


def test_real_build_symbols_every_image(built: bytes, built_plain: bytes) -> None:
    """zstd-compressed and plain cubins and PTX all list the one kernel."""
    for data in (built, built_plain):
        for img in read_fatbin(data):
            assert image_symbols(data, img) == {"ak_test_scale"}, img.target


def test_lz4_images(nvcc: str, tmp_path: Path) -> None:
    """nvcc's LZ4 (--compress-mode=speed here; -Xfatbin=-compress-all before CUDA 12.8)."""
    old = nvcc_release(nvcc) < (12, 8)
    args = ["-Xfatbin=-compress-all"] if old else ["--compress-mode=speed"]
    src = tmp_path / "scale.cu"
    src.write_text(KERNEL)
    out = tmp_path / "scale.fatbin"
    gencode = ["-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_75,code=compute_75"]
    subprocess.run([nvcc, "--fatbin", "-o", str(out), str(src), *args, *gencode], check=True)
    data = out.read_bytes()
    lz4 = [i for i in read_fatbin(data) if i.compression == "lz4"]
    assert lz4, "no LZ4 image in the build"
    for img in read_fatbin(data):
        assert image_symbols(data, img) == {"ak_test_scale"}, img.target


def test_lz4_block_decoder() -> None:
    # literals only; a match; an overlapping match (offset 1 repeats a byte); lengths >= 15
    assert lz4_block_decompress(bytes([0x50]) + b"hello", 5) == b"hello"
    # token 0x30: 3 literals, then a 4-byte match at offset 3 (overlapping); then "!"
    block = bytes([0x30]) + b"abc" + bytes([3, 0]) + bytes([0x10]) + b"!"
    assert lz4_block_decompress(block, 8) == b"abcabca!"
    # token 0x12: 1 literal, match 2 + 4 = 6 at offset 1 -> 7 x "z"; then 1 literal
    block = bytes([0x12]) + b"z" + bytes([1, 0]) + bytes([0x10]) + b"."
    assert lz4_block_decompress(block, 8) == b"zzzzzzz."
    long_lit = b"x" * 20  # 15 + 5
    block = bytes([0xF0, 5]) + long_lit
    assert lz4_block_decompress(block, 20) == long_lit
    block = bytes([0x1F]) + b"q" + bytes([1, 0, 3]) + bytes([0x00])  # match 15 + 3 + 4 = 22
    assert lz4_block_decompress(block, 23) == b"q" * 23
    with pytest.raises(FatbinError, match="offset 9 outside"):
        lz4_block_decompress(bytes([0x10]) + b"a" + bytes([9, 0]), 5)
    with pytest.raises(FatbinError, match="decoded 5 bytes, header says 6"):
        lz4_block_decompress(bytes([0x50]) + b"hello", 6)
    with pytest.raises(FatbinError, match="ends inside a sequence"):
        lz4_block_decompress(bytes([0x50]) + b"he" + bytes([0x10]), 5)


GUARDED = """
extern "C" __global__ void ak_test_every(float* y) { y[threadIdx.x] = 1.0f; }
#if {cond}
extern "C" __global__ void ak_test_a_only(float* y) {{ y[threadIdx.x] = 2.0f; }}
#endif
"""
GUARDED_IMAGES = [("cubin", 90, ""), ("cubin", 90, "a"), ("ptx", 90, "")]


def _guarded_build(nvcc: str, tmp_path: Path, cond: str) -> Path:
    src = tmp_path / "guarded.cu"
    src.write_text(GUARDED.replace("{cond}", cond).replace("{{", "{").replace("}}", "}"))
    out = tmp_path / "guarded.fatbin"
    gencode = [
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90a,code=sm_90a",
        "-gencode=arch=compute_90,code=compute_90",
    ]
    compress = "--compress-mode=size" if nvcc_release(nvcc) >= (12, 8) else "-Xfatbin=-compress-all"
    subprocess.run([nvcc, "--fatbin", "-o", str(out), str(src), compress, *gencode], check=True)
    return out


def _guarded_plan() -> dict[str, Any]:
    fam = _plan_family(GUARDED_IMAGES)
    fam["entries"] = [
        {"symbol": "ak_test_every", "op": "every", "dtype": "f32"},
        {"symbol": "ak_test_a_only", "op": "a_only", "dtype": "f32", "variant": "v",
         "layout": "", "images": ["sm_90a"]},
    ]  # fmt: skip
    return {
        "archs": None,
        "families_filter": None,
        "targets": {},
        "constants": {},
        "families": {"guarded": fam},
    }


def _write_manifest_tool(plan: dict[str, Any], fatbin: Path, tmp_path: Path) -> Any:
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    cmd = [
        sys.executable, str(ROOT / "tools" / "write_manifest.py"),
        "--plan", str(tmp_path / "plan.json"), "--matrix", str(ROOT / "arch_matrix.toml"),
        "--toolkit", "12.4.131", "--out", str(tmp_path / "kernels"), f"guarded={fatbin}",
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_symbol_check_passes_the_plans_guards(nvcc: str, tmp_path: Path) -> None:
    fatbin = _guarded_build(nvcc, tmp_path, _image_condition("sm_90a"))
    r = _write_manifest_tool(_guarded_plan(), fatbin, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "guarded.fatbin" in r.stdout and "checked: compute_90 sm_90 sm_90a" in r.stdout
    data = fatbin.read_bytes()
    found = {i.target: image_symbols(data, i) for i in read_fatbin(data)}
    assert found == {
        "sm_90": {"ak_test_every"},
        "sm_90a": {"ak_test_every", "ak_test_a_only"},
        "compute_90": {"ak_test_every"},
    }


def test_symbol_check_fails_the_build_on_a_guard_that_drops_kernels(
    nvcc: str, tmp_path: Path
) -> None:
    """nvcc 12.4 does not define __CUDA_ARCH_SPECIFIC__: a guard on it compiles to nothing in
    the sm_90a image, and the fatbin's headers still match the plan. The symbols do not."""
    dropped = "(__CUDA_ARCH__ == 900 && defined(__AK_MACRO_THIS_NVCC_DOES_NOT_DEFINE__))"
    fatbin = _guarded_build(nvcc, tmp_path, dropped)
    r = _write_manifest_tool(_guarded_plan(), fatbin, tmp_path)
    assert r.returncode == 1
    assert "aotkernels manifest: error: guarded: kernels differ from the plan" in r.stderr
    assert "sm_90a: 1 missing [ak_test_a_only], 0 unexpected []" in r.stderr
    assert not (tmp_path / "kernels" / "manifest.json").exists()


def test_symbol_check_fails_on_a_guard_that_leaks_kernels(nvcc: str, tmp_path: Path) -> None:
    fatbin = _guarded_build(nvcc, tmp_path, "(__CUDA_ARCH__ == 900)")
    r = _write_manifest_tool(_guarded_plan(), fatbin, tmp_path)
    assert r.returncode == 1
    assert "sm_90: 0 missing [], 1 unexpected [ak_test_a_only]" in r.stderr
    assert "compute_90: 0 missing [], 1 unexpected [ak_test_a_only]" in r.stderr


def test_cubin_entries_reject_non_elf() -> None:
    with pytest.raises(FatbinError, match="not a little-endian ELF64"):
        symbols.cubin_entries(b"\x7fELF\x01\x01" + bytes(100))


def test_cuobjdump_reads_the_kernels_without_a_zstd_decoder(
    built_plain: bytes, built: bytes, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where this Python has no zstd decoder (a device image without zstandard), the toolkit's
    cuobjdump lists the kernels of one image extracted into its own fatbin; with neither, the
    error says what would help."""
    for module in ("compression", "compression.zstd", "zstandard"):  # import fails
        monkeypatch.setitem(sys.modules, module, None)
    zstd = [i for i in read_fatbin(built) if i.compression == "zstd"]
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump is not None:
        for img in read_fatbin(built_plain):
            one = extract_image(built_plain, img)
            assert symbols.cuobjdump_symbols(cuobjdump, one, img.kind) == {"ak_test_scale"}
        if nvcc_release(cuobjdump.removesuffix("cuobjdump") + "nvcc") >= (12, 8):  # reads zstd
            for img in zstd:
                assert image_symbols(built, img) == {"ak_test_scale"}, img.target
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(symbols.ZstdUnavailable, match="zstandard package"):
        image_symbols(built, zstd[0])
