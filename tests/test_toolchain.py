"""tools/cuda_toolchain.py and tools/set_variant.py, offline.

The CUDA 12 path (NVIDIA's redistributable archives, checked against the release's JSON) runs
against a fake redist folder through ``file://``: download, version pins, sha256, unpacking and
the CUDA-like layout (targets/<arch>-linux links, lib64, libcudart.so) nvcc and CMake expect.
The CUDA 13 path (pip from PyPI) needs the network; tools/build_wheels.sh runs it for real.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT

TOOL = ROOT / "tools" / "cuda_toolchain.py"
VARIANT = ROOT / "tools" / "set_variant.py"
PLAT = "linux-x86_64" if platform.machine() in ("x86_64", "AMD64") else "linux-sbsa"
TARGET_DIR = "x86_64-linux" if PLAT == "linux-x86_64" else "sbsa-linux"
FILES = {
    "cuda_nvcc": {
        "bin/nvcc": b"#!/bin/sh\n",
        "nvvm/bin/cicc": b"",
        "include/crt/host_config.h": b"",
    },
    "cuda_cudart": {"include/cuda.h": b"", "lib/libcudart.so.12": b"ELF"},
    "cuda_cccl": {"include/cuda/std/type_traits": b""},
}
VERSIONS = {"cuda_nvcc": "12.9.86", "cuda_cudart": "12.9.79", "cuda_cccl": "12.9.27"}


def _fake_redist(root: Path, *, bad_sha: str = "", version: dict[str, str] | None = None) -> str:
    index = {}
    for comp, files in FILES.items():
        ver = (version or {}).get(comp, VERSIONS[comp])
        top = f"{comp}-{PLAT}-{ver}-archive"
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:xz") as tf:
            for name, data in files.items():
                info = tarfile.TarInfo(f"{top}/{name}")
                info.size = len(data)
                info.mode = 0o755 if name.startswith(("bin/", "nvvm/bin/")) else 0o644
                tf.addfile(info, io.BytesIO(data))
        rel = f"{comp}/{PLAT}/{top}.tar.xz"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(buf.getvalue())
        digest = hashlib.sha256(buf.getvalue()).hexdigest()
        index[comp] = {
            "name": comp,
            "version": ver,
            PLAT: {"relative_path": rel, "sha256": "0" * 64 if comp == bad_sha else digest},
        }
    (root / "redistrib_12.9.1.json").write_text(json.dumps(index))
    return root.as_uri() + "/"


def _install(url: str, prefix: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AOTKERNELS_CUDA_REDIST_URL": url}
    cmd = [sys.executable, str(TOOL), "install", "12", "--source", "nvidia", "--prefix",
           str(prefix), "--no-check"]  # fmt: skip
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_cuda12_redist_layout(tmp_path: Path) -> None:
    r = _install(_fake_redist(tmp_path / "redist"), tmp_path / "cu12")
    assert r.returncode == 0, r.stderr
    root = (tmp_path / "cu12" / "cuda").resolve()
    assert (root / "bin" / "nvcc").read_bytes() == b"#!/bin/sh\n"
    assert os.access(root / "bin" / "nvcc", os.X_OK)
    assert (root / "nvvm" / "bin" / "cicc").is_file()
    assert (root / "targets" / TARGET_DIR / "include" / "cuda.h").is_file()
    assert (root / "targets" / TARGET_DIR / "lib" / "libcudart.so.12").is_file()
    assert (root / "lib" / "libcudart.so").resolve() == (root / "lib" / "libcudart.so.12")
    assert (root / "lib64").resolve() == root / "lib"
    env = dict(line.removeprefix("export ").split("=", 1) for line in r.stdout.splitlines())
    assert env["CUDACXX"] == str(root / "bin" / "nvcc")
    assert env["CUDAToolkit_ROOT"] == str(root)


def test_cuda12_refuses_bad_sha256(tmp_path: Path) -> None:
    r = _install(_fake_redist(tmp_path / "redist", bad_sha="cuda_cudart"), tmp_path / "cu12")
    assert r.returncode != 0
    assert "cuda_cudart: sha256" in r.stderr


def test_cuda12_refuses_other_versions(tmp_path: Path) -> None:
    url = _fake_redist(tmp_path / "redist", version={"cuda_nvcc": "12.9.41"})
    r = _install(url, tmp_path / "cu12")
    assert r.returncode != 0
    assert "cuda_nvcc of CUDA 12.9.1 is 12.9.41, pinned 12.9.86" in r.stderr


# --- CUDA 12 from Debian: fake .debs (ar of data.tar.xz) in a file:// pool -------------------

TRIPLET = "x86_64-linux-gnu" if PLAT == "linux-x86_64" else "aarch64-linux-gnu"
DEBS = {
    "nvidia-cuda-toolkit": {
        "usr/lib/nvidia-cuda-toolkit/bin/nvcc": b"#!/bin/sh\n",
        "usr/lib/nvidia-cuda-toolkit/bin/cicc": b"cicc",
        "usr/lib/nvidia-cuda-toolkit/bin/crt/link.stub": b"stub",
        "usr/lib/nvidia-cuda-toolkit/bin/nvcc.profile": "/etc/nvcc.profile",  # a link: dropped
        "usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc": b"bc",
        "usr/bin/ptxas": b"ptxas",
        "usr/bin/fatbinary": b"fatbinary",
        "usr/bin/nvcc": b"#!/bin/sh\n# Debian's wrapper\n",  # dropped: the real one is above
        "etc/nvcc.profile": b"PATH += /usr/lib/nvidia-cuda-toolkit/bin:\n",
    },
    "nvidia-cuda-dev": {
        "usr/include/cuda.h": b"/* cuda.h */",
        "usr/include/crt/host_config.h": b"",
        f"usr/lib/{TRIPLET}/libcudart_static.a": b"!<arch>\n",
        f"usr/lib/{TRIPLET}/libcudart.so": "libcudart.so.12",
        f"usr/lib/{TRIPLET}/libcublas.so": b"not wanted",
        f"usr/lib/{TRIPLET}/stubs/libcuda.so": b"stub",
    },
    "libcudart12": {f"usr/lib/{TRIPLET}/libcudart.so.12": b"ELF"},
    "libcu++-dev": {"usr/include/nv/target": b"// nv/target"},
}


def _ar(members: dict[str, bytes]) -> bytes:
    out = b"!<arch>\n"
    for name, data in members.items():
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode()
        out += data + (b"\n" if len(data) % 2 else b"")
    return out


def _deb(files: dict[str, bytes | str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(f"./{name}")
            if isinstance(data, str):
                info.type, info.linkname = tarfile.SYMTYPE, data
                tf.addfile(info)
            else:
                info.size, info.mode = len(data), 0o755 if "/bin/" in name else 0o644
                tf.addfile(info, io.BytesIO(data))
    return _ar({"debian-binary": b"2.0\n", "control.tar.xz": b"", "data.tar.xz": buf.getvalue()})


def _fake_pool(root: Path, bad: str = "") -> list[tuple[str, str, int]]:
    pins = []
    for pkg, files in DEBS.items():
        rel = f"pool/test/{pkg}_1_test.deb"
        data = _deb(files)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        digest = "0" * 64 if pkg == bad else hashlib.sha256(data).hexdigest()
        pins.append((rel, digest, len(data)))
    return pins


def _toolchain_module() -> Any:
    sys.path.insert(0, str(TOOL.parent))
    try:
        import cuda_toolchain
    finally:
        sys.path.remove(str(TOOL.parent))
    return cuda_toolchain


def _install_debian(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    bad: str = "",
) -> tuple[int | str | None, str, str]:
    tc = _toolchain_module()
    pool = tmp_path / "mirror"
    monkeypatch.setitem(tc.DEBIAN_12, tc._machine(), _fake_pool(pool, bad))
    monkeypatch.setenv("AOTKERNELS_DEBIAN_MIRROR", pool.as_uri())
    argv = ["install", "12", "--prefix", str(tmp_path / "cu12"), "--no-check"]
    try:
        code: int | str | None = tc.main(argv)
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cuda12_debian_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The .debs unpack (no dpkg) into NVIDIA's layout with a relative nvcc.profile."""
    code, out, err = _install_debian(tmp_path, monkeypatch, capsys)
    assert code == 0, err
    root = (tmp_path / "cu12" / "cuda").resolve()
    assert (root / "bin" / "nvcc").read_bytes() == b"#!/bin/sh\n"  # not Debian's wrapper
    assert os.access(root / "bin" / "nvcc", os.X_OK)
    assert (root / "bin" / "ptxas").read_bytes() == b"ptxas"
    assert (root / "bin" / "crt" / "link.stub").is_file()
    assert (root / "nvvm" / "bin" / "cicc").read_bytes() == b"cicc"
    assert (root / "nvvm" / "libdevice" / "libdevice.10.bc").is_file()
    profile = (root / "bin" / "nvcc.profile").read_text()
    assert not (root / "bin" / "nvcc.profile").is_symlink() and "/etc" not in profile
    assert "TOP              = $(_HERE_)/.." in profile
    assert (root / "targets" / TARGET_DIR / "include" / "nv" / "target").is_file()
    assert (root / "targets" / TARGET_DIR / "include" / "cuda.h").is_file()
    assert (root / "lib64" / "libcudart_static.a").is_file()
    assert (root / "lib64" / "stubs" / "libcuda.so").is_file()
    assert (root / "lib" / "libcudart.so").resolve() == (root / "lib64" / "libcudart.so.12")
    assert not (root / "lib64" / "libcublas.so").exists()  # only what a build needs
    assert not (tmp_path / "cu12" / "debs").exists()  # downloads removed once unpacked
    stamp = json.loads((root / "aotkernels-toolchain.json").read_text())
    assert stamp["source"] == "debian" and stamp["nvcc"] == "12.4.131"
    assert [f["file"] for f in stamp["files"]] == [f"{p}_1_test.deb" for p in DEBS]
    env = dict(line.removeprefix("export ").split("=", 1) for line in out.splitlines())
    assert env["CUDACXX"] == str(root / "bin" / "nvcc")
    assert env["CUDAToolkit_ROOT"] == str(root)
    # the build records where its compiler came from (manifest toolkit_origin)
    assert env["AOTKERNELS_TOOLKIT_ORIGIN"] == "'Debian nvidia-cuda-toolkit_1_test.deb'"
    assert "sha256" in err and "unpacked" in err


def test_cuda12_debian_refuses_bad_sha256(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _install_debian(tmp_path, monkeypatch, capsys, bad="nvidia-cuda-dev")
    assert code != 0 and "nvidia-cuda-dev_1_test.deb: sha256" in str(code) + err
    assert not (tmp_path / "cu12" / "debs" / "nvidia-cuda-dev_1_test.deb").exists()


def test_cuda12_debian_pins() -> None:
    """Four .debs per machine, each with a sha256 and a size; the same CUDA 12.4.1 build."""
    tc = _toolchain_module()
    assert set(tc.DEBIAN_12) == {"x86_64", "aarch64"}
    for machine, pins in tc.DEBIAN_12.items():
        names = [Path(p).name for p, _, _ in pins]
        assert [n.split("_")[0] for n in names] == [
            "nvidia-cuda-toolkit", "nvidia-cuda-dev", "libcudart12", "libcu++-dev",
        ], machine  # fmt: skip
        assert all("12.4.1-2" in n for n in names[:3]), names
        for _, digest, size in pins:
            assert len(digest) == 64 and int(digest, 16) >= 0 and size > 0
    assert tc.NVCC_VERSION["debian"] == "12.4.131"


def test_cuda13_pins_are_exact_and_hashed() -> None:
    """Every CUDA 13 package pinned with == and a sha256 per architecture."""
    sys.path.insert(0, str(TOOL.parent))
    try:
        import cuda_toolchain
    finally:
        sys.path.remove(str(TOOL.parent))
    assert {p.split("==")[0] for p in cuda_toolchain.PYPI_13} == {
        "nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-runtime",
        "nvidia-cuda-cccl",
    }  # fmt: skip
    for pin, hashes in cuda_toolchain.PYPI_13.items():
        assert pin.count("==") == 1, pin
        assert set(hashes) == {"x86_64", "aarch64"}, pin
        assert all(len(h) == 64 and int(h, 16) >= 0 for h in hashes.values()), pin


# --- set_variant ------------------------------------------------------------------------------


def test_set_variant_rewrites_only_the_project_name(tmp_path: Path) -> None:
    py = tmp_path / "pyproject.toml"
    original = (ROOT / "pyproject.toml").read_text()
    py.write_text(original)
    r = subprocess.run(
        [sys.executable, str(VARIANT), "cu12", "--pyproject", str(py)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    new = py.read_text()
    changed = [
        (a, b) for a, b in zip(original.splitlines(), new.splitlines(), strict=True) if a != b
    ]
    (before, after), *rest = changed
    assert rest == [] and before.startswith('name = "aotkernels')  # "aotkernels" or a variant
    assert after == 'name = "aotkernels-cu12"'
    r = subprocess.run(
        [sys.executable, str(VARIANT), "cu13", "--pyproject", str(py)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert r.returncode == 0 and 'name = "aotkernels-cu13"' in py.read_text(), r.stderr


def _variant_wheel(path: Path, dist: str, toolkit: str) -> Path:
    whl = path / f"{dist}-0.1.0-cp311-cp311-linux_x86_64.whl"
    manifest = {
        "toolkit": toolkit,
        "toolkit_full": f"{toolkit}.0",
        "driver_floor": f"{toolkit.split('.')[0]}.0",
    }
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr("aotkernels/kernels/manifest.json", json.dumps(manifest))
    return whl


def test_set_variant_check(tmp_path: Path) -> None:
    def check(whl: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(VARIANT), "--check", str(whl)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    r = check(_variant_wheel(tmp_path, "aotkernels_cu13", "13.0"))
    assert r.returncode == 0 and "cu13, CUDA 13.0.0, driver >= 13.0" in r.stdout, r.stderr
    r = check(_variant_wheel(tmp_path, "aotkernels_cu12", "13.0"))
    assert r.returncode != 0 and "built with CUDA 13.0" in r.stderr and "named cu12" in r.stderr
    r = check(_variant_wheel(tmp_path, "aotkernels", "13.0"))
    assert r.returncode != 0 and "not a variant wheel" in r.stderr
