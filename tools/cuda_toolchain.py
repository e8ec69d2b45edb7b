#!/usr/bin/env python3
"""Install a pinned CUDA toolchain (nvcc + headers) into a prefix and print the build's env.

One pinned release per CUDA major, every file checked by sha256, so a wheel build (CI's
manylinux container or a developer's machine) compiles with exactly the toolchain its variant
names, whatever CUDA the host has:

  13         PyPI: nvidia-cuda-nvcc, -crt, nvidia-nvvm, -cuda-runtime (headers), -cuda-cccl, all
             of CUDA 13.0 Update 2 (nvcc 13.0.88). They unpack into
             ``nvidia/cu13/{bin,include,lib,nvvm}``.
  12         (``--source debian``, the default) NVIDIA's CUDA 12.4.1 toolkit as Debian trixie's
             ``non-free`` component packages it (nvcc 12.4.131), plus CCCL's ``<nv/target>``
             from ``main``. Four .deb files fetched from the archive's pool (any Debian mirror),
             unpacked without dpkg (ar + tar) and laid out like NVIDIA's installer does. No
             Debian suite carries 12.8 or later, so this build has no sm_100/sm_120 cubins.
  12         (``--source nvidia``) NVIDIA's redistributable archives of CUDA 12.9 Update 1
             (nvcc 12.9.86), checked against the release's redistrib JSON: builds every target
             of the matrix, where developer.download.nvidia.com (or a mirror) is reachable.

PyPI has no usable CUDA 12 compiler: nvidia-cuda-nvcc-cu12 ships only ptxas, libnvvm,
libdevice and the crt headers (no nvcc, cicc, cudafe++ or fatbinary).

Either way the result is laid out like a CUDA install (``targets/<arch>-linux/{include,lib}``
links and ``lib/libcudart.so``, which nvcc.profile and CMake's FindCUDAToolkit expect), nvcc is
test-compiled once, and the environment to build with is printed:

  eval "$(python tools/cuda_toolchain.py install 13 --prefix /tmp/cu13)"
  python tools/cuda_toolchain.py env 12 --prefix /tmp/cu12 --github-env   # append to $GITHUB_ENV

Downloads stream to disk (the largest .deb is 934 MB) and are hashed on the way. Standard
library only (it runs in a bare build container before anything else is installed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

# --- CUDA 13: PyPI wheels, exact versions and the sha256 of each platform's file ------------
# nvcc 13.0.88, crt and nvvm of the same build; the runtime headers of 13.0.96 (CUDA 13.0.2,
# whose nvcc is still 13.0.88; its headers differ from 13.0.88's only in library_types.h,
# which no kernel includes); CCCL 13.0.85 of the same release. cuda_fp16.h/cuda_bf16.h
# include <nv/target> (CCCL) and nvcc's implicit cuda_runtime.h needs crt/.
PYPI_13: dict[str, dict[str, str]] = {
    "nvidia-cuda-nvcc==13.0.88": {
        "x86_64": "56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03",
        "aarch64": "c7ff28f86a24effdc6c034fa15230c549a273e4771b10a7fec14996f8cf3307f",
    },
    "nvidia-cuda-crt==13.0.88": {
        "x86_64": "2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4",
        "aarch64": "ee2ea2a97073e02ee62bb27841f437332be2c248e3eac013df07997ada39c003",
    },
    "nvidia-nvvm==13.0.88": {
        "x86_64": "c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0",
        "aarch64": "c4376a291d72d22a315d9d2f69bdae8f8cd83a627f75bad395cee49a0fe65dc1",
    },
    "nvidia-cuda-runtime==13.0.96": {
        "x86_64": "7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548",
        "aarch64": "ef9bcbe90493a2b9d810e43d249adb3d02e98dd30200d86607d8d02687c43f55",
    },
    "nvidia-cuda-cccl==13.0.85": {
        "x86_64": "e0da7ad981f3a8aff08241b5bfc1af868742a63e2762f53a5171c492ef242649",
        "aarch64": "6f0203e29fed809ee2b7fe9b1344df66ecab990c37d6a2e0e189b26d6c97ed7c",
    },
}

# --- CUDA 12 from Debian trixie: pool path, sha256 and size of each .deb, per machine --------
# nvidia-cuda-toolkit: nvcc, cicc, ptxas, fatbinary, cudafe++, nvlink, libdevice (12.4.131).
# nvidia-cuda-dev: the only Debian package with the CUDA headers and libcudart_static.a /
#   libcudadevrt.a (CMake's compiler check links them); 934 MB, of which ~20 MB is kept.
# libcudart12: the libcudart.so.12 that libcudart.so links to (FindCUDAToolkit's CUDA::cudart).
# libcu++-dev (main): CCCL 2.3.2 = CUDA 12.4's; cuda_fp16.h/cuda_bf16.h include <nv/target>.
DEBIAN_URL = "https://deb.debian.org/debian/"
DEBIAN_ENV = "AOTKERNELS_DEBIAN_MIRROR"  # same pool layout; any scheme urllib opens (file://)
_NCT = "pool/non-free/n/nvidia-cuda-toolkit/"
DEBIAN_12: dict[str, list[tuple[str, str, int]]] = {
    "x86_64": [
        (
            _NCT + "nvidia-cuda-toolkit_12.4.131~12.4.1-2_amd64.deb",
            "cd5fe85aee38d108b315f408a688641478f2402622a10c677478eb7a6c4e5319",
            87240108,
        ),
        (
            _NCT + "nvidia-cuda-dev_12.4.127~12.4.1-2_amd64.deb",
            "d846838f914a0176948d48a8bcade5d6dbcccb5c9374343f6475f5503f173ee0",
            933853452,
        ),
        (
            _NCT + "libcudart12_12.4.127~12.4.1-2_amd64.deb",
            "361b3721cf84bf068e111ff013c819de61cb475268b0d38db99839471f1b4130",
            176216,
        ),
        (
            "pool/main/c/cccl/libcu++-dev_2.3.2-2_all.deb",
            "30e911c1909265591b5ea793df0e49e56bed631238b68b3e75c97590c4985686",
            765284,
        ),
    ],
    "aarch64": [
        (
            _NCT + "nvidia-cuda-toolkit_12.4.131~12.4.1-2_arm64.deb",
            "34c1018e03a87493e2bac39dbb7ca7cff2ca84e64f4556089672ba09c8025858",
            81564332,
        ),
        (
            _NCT + "nvidia-cuda-dev_12.4.127~12.4.1-2_arm64.deb",
            "cacf17cf78e8bc35bc17c8a97beddc7d26f4beea8d6b60bb0754c244ea33d78c",
            928553228,
        ),
        (
            _NCT + "libcudart12_12.4.127~12.4.1-2_arm64.deb",
            "712b69f6af3a0cfe7a4d1ec0dc7bdc08f535dd403dd6ebaaeadab3f367d3dffa",
            177528,
        ),
        (
            "pool/main/c/cccl/libcu++-dev_2.3.2-2_all.deb",
            "30e911c1909265591b5ea793df0e49e56bed631238b68b3e75c97590c4985686",
            765284,
        ),
    ],
}
_DEB_TOOLS = ("ptxas", "fatbinary", "cudafe++", "nvlink", "bin2c", "cuobjdump", "nvdisasm")
_DEB_LIBS = ("libcudart_static.a", "libcudadevrt.a", "libculibos.a", "libcudart.so")

# --- CUDA 12 from NVIDIA: redistributable archives of CUDA 12.9.1 (the versions PyPI's
# *-cu12 12.9.x wheels carry too). Each archive's sha256 is read from the release's redistrib
# JSON, whose version fields must equal these pins.
REDIST_URL = "https://developer.download.nvidia.com/compute/cuda/redist/"  # or a mirror:
REDIST_ENV = "AOTKERNELS_CUDA_REDIST_URL"  # same layout; any scheme urllib opens (file:// too)
REDIST_12_RELEASE = "12.9.1"
REDIST_12 = {"cuda_nvcc": "12.9.86", "cuda_cudart": "12.9.79", "cuda_cccl": "12.9.27"}

SOURCES = {12: ("debian", "nvidia"), 13: ("pypi",)}
NVCC_VERSION = {"debian": "12.4.131", "nvidia": "12.9.86", "pypi": "13.0.88"}
# The newest GCC each nvcc accepts as its host compiler (nvcc's host_config.h).
MAX_GCC = {"12.4": 13, "12.9": 14, "13.0": 15}
_MACHINE = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
_STAMP = "aotkernels-toolchain.json"  # in the root: source, nvcc version, files and hashes


def _machine() -> str:
    m = platform.machine().lower()
    if m not in _MACHINE:
        raise SystemExit(f"cuda_toolchain: unsupported machine {platform.machine()!r}")
    return _MACHINE[m]


def _target_dir() -> str:
    """nvcc.profile's $(_TARGET_DIR_) name: x86_64-linux, or sbsa-linux on Arm servers."""
    return "x86_64-linux" if _machine() == "x86_64" else "sbsa-linux"


def cuda_root(major: int, prefix: Path) -> Path:
    return prefix / "site" / "nvidia" / "cu13" if major == 13 else prefix / "cuda"


def _log(msg: str) -> None:
    print(f"cuda_toolchain: {msg}", file=sys.stderr)


def _install_13(prefix: Path, python: str) -> list[dict[str, str]]:
    arch = _machine()
    reqs = prefix / "requirements-cuda13.txt"
    prefix.mkdir(parents=True, exist_ok=True)
    reqs.write_text("".join(f"{pin} --hash=sha256:{h[arch]}\n" for pin, h in PYPI_13.items()))
    site = prefix / "site"
    if site.exists():
        shutil.rmtree(site)
    cmd = [
        python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
        "--only-binary=:all:", "--require-hashes", "--target", str(site), "-r", str(reqs),
    ]  # fmt: skip
    _log(" ".join(cmd))
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    return [{"file": pin, "sha256": h[arch]} for pin, h in PYPI_13.items()]


def _download(url: str, dest: Path, mirror_env: str) -> str:
    """Stream ``url`` into ``dest`` (1 MiB at a time, never whole in memory); return its sha256."""
    _log(f"downloading {url}")
    digest = hashlib.sha256()
    t0 = time.monotonic()
    size = 0
    try:
        with urllib.request.urlopen(url, timeout=600) as r, dest.open("wb") as f:
            while chunk := r.read(1 << 20):
                digest.update(chunk)
                f.write(chunk)
                size += len(chunk)
    except OSError as e:  # URLError, timeouts, refused connections
        raise SystemExit(
            f"cuda_toolchain: cannot download {url}: {e} (point {mirror_env} at a mirror)"
        ) from None
    secs = max(time.monotonic() - t0, 1e-3)
    _log(f"  {size:,} B in {secs:.1f} s ({size / secs / 1e6:.0f} MB/s)")
    return digest.hexdigest()


def _fetch_checked(url: str, dest: Path, sha256: str, mirror_env: str, label: str) -> None:
    digest = _download(url, dest, mirror_env)
    if digest != sha256:
        dest.unlink()
        raise SystemExit(f"cuda_toolchain: {label}: sha256 {digest} != pinned {sha256} ({url})")
    _log(f"  sha256 {digest} ok")


def _ar_member(deb: Path, prefix: str) -> tuple[str, int, int]:
    """(name, offset, size) of the first member of the ar archive ``deb`` named ``prefix*``."""
    with deb.open("rb") as f:
        if f.read(8) != b"!<arch>\n":
            raise SystemExit(f"cuda_toolchain: {deb.name} is not an ar archive")
        while header := f.read(60):
            name = header[:16].decode().strip().rstrip("/")
            size = int(header[48:58].decode())
            if name.startswith(prefix):
                return name, f.tell(), size
            f.seek(size + size % 2, os.SEEK_CUR)  # members are 2-byte aligned
    raise SystemExit(f"cuda_toolchain: {deb.name} has no {prefix}* member")


class _Slice:
    """A read-only file object over ``size`` bytes of ``f`` from its current position."""

    def __init__(self, f: Any, size: int) -> None:
        self.f, self.left = f, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data: bytes = self.f.read(n)
        self.left -= len(data)
        return data


def _unpack_deb(deb: Path, place: Callable[[str], str | None], root: Path) -> int:
    """Extract the files (and links) of ``deb``'s data.tar that ``place`` maps to a path under
    ``root``; return how many. Streams: the tar is read once, front to back."""
    name, offset, size = _ar_member(deb, "data.tar")
    mode = {"data.tar.xz": "r|xz", "data.tar.gz": "r|gz", "data.tar": "r|"}.get(name)
    if mode is None:
        raise SystemExit(f"cuda_toolchain: {deb.name}: cannot read {name}")
    n = 0
    with deb.open("rb") as f:
        f.seek(offset)
        with tarfile.open(fileobj=_Slice(f, size), mode=mode) as tf:  # type: ignore[call-overload]
            for m in tf:
                rel = place(m.name.removeprefix("./"))
                if rel is None or not (m.isfile() or m.issym()):
                    continue
                dest = root / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                if dest.is_symlink() or dest.exists():
                    dest.unlink()
                if m.issym():
                    dest.symlink_to(m.linkname)
                else:
                    src = tf.extractfile(m)
                    assert src is not None
                    with dest.open("wb") as out:
                        shutil.copyfileobj(src, out, 1 << 20)
                    dest.chmod(0o755 if m.mode & 0o111 else 0o644)
                n += 1
    return n


def _debian_place(triplet: str) -> Callable[[str], str | None]:
    """Map a Debian path to NVIDIA's layout (bin/, nvvm/, include/, lib64/), or None to skip."""
    libdir = f"usr/lib/{triplet}/"

    def place(path: str) -> str | None:
        if path.startswith("usr/include/"):
            return "include/" + path.removeprefix("usr/include/")
        if path.startswith("usr/bin/") and path.removeprefix("usr/bin/") in _DEB_TOOLS:
            return "bin/" + path.removeprefix("usr/bin/")
        tk = path.removeprefix("usr/lib/nvidia-cuda-toolkit/")
        if tk in ("bin/nvcc", "bin/crt/link.stub", "bin/crt/prelink.stub"):
            return tk  # Debian's bin/nvcc.profile is a link to /etc: ours is written below
        if tk == "bin/cicc":
            return "nvvm/bin/cicc"
        if tk.startswith("libdevice/"):
            return "nvvm/" + tk
        lib = path.removeprefix(libdir)
        if lib in _DEB_LIBS or lib.startswith("libcudart.so.") or lib == "stubs/libcuda.so":
            return "lib64/" + lib
        return None

    return place


# NVIDIA's nvcc.profile, relative to bin/: the prefix can move.
_NVCC_PROFILE = """\
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/$(_NVVM_BRANCH_)/libdevice
LD_LIBRARY_PATH += $(TOP)/lib:
PATH            += $(TOP)/$(_NVVM_BRANCH_)/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/$(_TARGET_DIR_)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/$(_TARGET_DIR_)/lib$(_TARGET_SIZE_)/stubs" \
"-L$(TOP)/$(_TARGET_DIR_)/lib$(_TARGET_SIZE_)"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
"""


def _base_url(env: str, default: str) -> str:
    """The download base: ``$env`` if set, else ``default``; with a trailing slash."""
    base = os.environ.get(env) or default
    return base if base.endswith("/") else base + "/"


def _empty_root(prefix: Path) -> Path:
    """CUDA 12's root under ``prefix``, created empty: an install never mixes with an old one."""
    root = cuda_root(12, prefix)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    return root


def _install_12_debian(prefix: Path, keep: bool) -> list[dict[str, str]]:
    arch = _machine()
    base = _base_url(DEBIAN_ENV, DEBIAN_URL)
    root = _empty_root(prefix)
    downloads = prefix / "debs"
    downloads.mkdir(exist_ok=True)
    place = _debian_place("x86_64-linux-gnu" if arch == "x86_64" else "aarch64-linux-gnu")
    files = []
    for pool_path, sha256, size in DEBIAN_12[arch]:
        deb = downloads / Path(pool_path).name
        if deb.is_file() and deb.stat().st_size == size and _sha256(deb) == sha256:
            _log(f"{deb.name}: already here, sha256 ok")
        else:
            _fetch_checked(base + pool_path, deb, sha256, DEBIAN_ENV, deb.name)
        t0 = time.monotonic()
        n = _unpack_deb(deb, place, root)
        _log(f"  {deb.name}: {n} files unpacked in {time.monotonic() - t0:.1f} s")
        if not keep:
            deb.unlink()
        files.append({"file": deb.name, "sha256": sha256})
    if not keep:
        downloads.rmdir()
    (root / "bin" / "nvcc.profile").write_text(_NVCC_PROFILE)
    return files


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _install_12_nvidia(prefix: Path) -> list[dict[str, str]]:
    plat = "linux-x86_64" if _machine() == "x86_64" else "linux-sbsa"
    base = _base_url(REDIST_ENV, REDIST_URL)
    root = _empty_root(prefix)
    files = []
    with tempfile.TemporaryDirectory() as tmp:
        index_file = Path(tmp) / "redistrib.json"
        _download(f"{base}redistrib_{REDIST_12_RELEASE}.json", index_file, REDIST_ENV)
        index = json.loads(index_file.read_text())
        for comp, version in REDIST_12.items():
            entry = index[comp]
            if entry["version"] != version:
                raise SystemExit(
                    f"cuda_toolchain: {comp} of CUDA {REDIST_12_RELEASE} is "
                    f"{entry['version']}, pinned {version}"
                )
            archive = Path(tmp) / "a.tar.xz"
            sha256 = entry[plat]["sha256"]
            _fetch_checked(base + entry[plat]["relative_path"], archive, sha256, REDIST_ENV, comp)
            unpacked = Path(tmp) / comp
            with tarfile.open(archive) as tf:
                if hasattr(tarfile, "tar_filter"):  # 3.12, and 3.10.12+/3.11.4+ backports
                    tf.extractall(unpacked, filter="tar")
                else:
                    tf.extractall(unpacked)
            archive.unlink()
            (top,) = (p for p in unpacked.iterdir() if p.is_dir())
            shutil.copytree(top, root, symlinks=True, dirs_exist_ok=True)
            shutil.rmtree(unpacked)
            files.append({"file": Path(entry[plat]["relative_path"]).name, "sha256": sha256})
    return files


def _link(link: Path, target: str) -> None:
    if link.is_symlink() or link.exists():
        return
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


def lay_out(major: int, prefix: Path) -> Path:
    """Add the links a CUDA install has and the wheels/archives lack; return the root."""
    root = cuda_root(major, prefix)
    link_layout(major, root)
    if major == 13:  # relative symlink beside the site folder: a stable, short root path
        _link(prefix / "cuda", os.path.relpath(root, prefix))
    return root


def link_layout(major: int, root: Path) -> None:
    """The links of a CUDA install in ``root``: lib/lib64, targets/<arch>-linux, libcudart.so."""
    if (root / "lib64").is_dir() and not (root / "lib").exists():
        _link(root / "lib", "lib64")
    else:
        _link(root / "lib64", "lib")
    tdir = root / "targets" / _target_dir()
    _link(tdir / "include", "../../include")
    _link(tdir / "lib", "../../lib")
    # FindCUDAToolkit wants find_library(cudart); the wheels ship only the versioned soname.
    _link(root / "lib" / "libcudart.so", f"libcudart.so.{major}")


def installed(major: int, prefix: Path) -> dict[str, Any]:
    """The stamp ``install`` wrote: source, nvcc version, files and their sha256."""
    stamp = cuda_root(major, prefix) / _STAMP
    if not stamp.is_file():
        raise SystemExit(f"cuda_toolchain: no CUDA {major} under {prefix}; run install")
    info: dict[str, Any] = json.loads(stamp.read_text())
    return info


def origin(info: dict[str, Any]) -> str:
    """``Debian nvidia-cuda-toolkit_12.4.131~12.4.1-2_amd64.deb``: what the manifest records."""
    what = {"debian": "Debian", "nvidia": "NVIDIA redist", "pypi": "PyPI"}[info["source"]]
    return f"{what} {info['files'][0]['file']}"


def _gcc_major(cxx: str) -> int | None:
    try:
        out = subprocess.run(
            [cxx, "-dumpfullversion", "-dumpversion"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return int(out.split(".")[0]) if out.strip()[:1].isdigit() else None


def host_compiler(nvcc_version: str) -> str | None:
    """A g++ this nvcc accepts, when the default one is too new for it (manylinux_2_28's is;
    nvcc 12.4 ignores NVCC_CCBIN, so the build passes it as CUDAHOSTCXX, which CMake hands to
    nvcc as -ccbin). None: the default g++ will do, or none was found (nvcc names the problem)."""
    newest = MAX_GCC[".".join(nvcc_version.split(".")[:2])]
    default = _gcc_major("g++")
    if default is not None and default <= newest:
        return None
    for v in range(newest, 8, -1):
        for cxx in (f"/opt/rh/gcc-toolset-{v}/root/usr/bin/g++", f"g++-{v}"):
            found = shutil.which(cxx)
            if found and _gcc_major(found) == v:
                return found
    return None


def _pin_host_compiler(root: Path, nvcc_version: str) -> None:
    """Where the default g++ is too new for this nvcc, link bin/gcc and bin/g++ to one it takes:
    nvcc.profile puts bin/ first on nvcc's PATH, so builds that pass no -ccbin (CMake without
    CUDAHOSTCXX, cibuildwheel) use it too. Debian's own package does the same with wrappers."""
    cxx = host_compiler(nvcc_version)
    if cxx is None:
        return
    cc = Path(cxx).with_name(Path(cxx).name.replace("g++", "gcc"))
    for name, target in (("g++", Path(cxx)), ("gcc", cc)):
        if target.is_file():
            _link(root / "bin" / name, str(target))
    _log(f"host compiler for nvcc {nvcc_version}: {cxx} (linked into {root / 'bin'})")


def check(major: int, prefix: Path) -> None:
    """nvcc reports the pinned version and compiles a kernel using fp16/bf16 to a fatbin."""
    root = cuda_root(major, prefix)
    want = installed(major, prefix)["nvcc"]
    nvcc = root / "bin" / "nvcc"
    out = subprocess.run([str(nvcc), "--version"], check=True, capture_output=True, text=True)
    if f"V{want}" not in out.stdout:
        raise SystemExit(f"cuda_toolchain: {nvcc} is not {want}:\n{out.stdout}")
    src = (
        "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
        'extern "C" __global__ void k(__nv_bfloat16* y, const __half* x)'
        " { y[threadIdx.x] = __float2bfloat16(__half2float(x[threadIdx.x])); }\n"
    )
    ccbin = host_compiler(want)
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / "k.cu"
        cu.write_text(src)
        subprocess.run(
            [str(nvcc), "-fatbin", "-arch=sm_75", "-o", str(Path(tmp) / "k.fatbin"), str(cu)]
            + (["-ccbin", ccbin] if ccbin else []),
            check=True,
            env={**os.environ, "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"},
        )
    _log(f"{nvcc}: CUDA {want}, test compile ok" + (f" (host compiler {ccbin})" if ccbin else ""))


def environment(major: int, prefix: Path) -> dict[str, str]:
    root = cuda_root(major, prefix).resolve()
    env = {
        "CUDA_HOME": str(root),
        "CUDA_PATH": str(root),
        "CUDAToolkit_ROOT": str(root),  # find_package(CUDAToolkit)
        "CUDACXX": str(root / "bin" / "nvcc"),  # CMake's CMAKE_CUDA_COMPILER
        "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "AOTKERNELS_CUDA_INCLUDE": str(root / "include"),
    }
    info = installed(major, prefix)
    env["AOTKERNELS_TOOLKIT_ORIGIN"] = origin(info)
    ccbin = host_compiler(info["nvcc"])
    if ccbin:
        env["CUDAHOSTCXX"] = ccbin  # CMake's CMAKE_CUDA_HOST_COMPILER (-ccbin)
    return env


def _emit(env: dict[str, str], github_env: bool) -> None:
    if github_env:
        path = os.environ.get("GITHUB_ENV")
        if not path:
            raise SystemExit("cuda_toolchain: --github-env but GITHUB_ENV is not set")
        with open(path, "a") as f:
            for k, v in env.items():
                if k != "PATH":
                    f.write(f"{k}={v}\n")
        gh_path = os.environ.get("GITHUB_PATH")
        if gh_path:
            with open(gh_path, "a") as f:
                f.write(str(Path(env["CUDACXX"]).parent) + "\n")
        return
    import shlex

    for k, v in env.items():
        print(f"export {k}={shlex.quote(v)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    for name, what in (("install", "install, check, print env"), ("env", "print env only")):
        p = sub.add_parser(name, help=what)
        p.add_argument("major", type=int, choices=(12, 13), help="CUDA major version")
        p.add_argument("--prefix", type=Path, required=True)
        p.add_argument("--github-env", action="store_true", help="append to $GITHUB_ENV")
        if name == "install":
            p.add_argument(
                "--source",
                choices=("debian", "nvidia", "pypi"),
                help="CUDA 12: debian (12.4, default) or nvidia (12.9); CUDA 13: pypi",
            )
            p.add_argument("--python", default=sys.executable, help="whose pip installs (13)")
            p.add_argument("--keep-downloads", action="store_true", help="keep PREFIX/debs")
            p.add_argument("--no-check", action="store_true", help="skip the test compile")
    args = ap.parse_args(argv)
    prefix = args.prefix.resolve()
    if args.command == "install":
        source = args.source or os.environ.get("AOTKERNELS_CUDA_SOURCE") or SOURCES[args.major][0]
        if source not in SOURCES[args.major]:
            ap.error(f"CUDA {args.major} comes from {' or '.join(SOURCES[args.major])}")
        t0 = time.monotonic()
        if source == "pypi":
            files = _install_13(prefix, args.python)
        elif source == "debian":
            files = _install_12_debian(prefix, args.keep_downloads)
        else:
            files = _install_12_nvidia(prefix)
        root = lay_out(args.major, prefix)
        _pin_host_compiler(root, NVCC_VERSION[source])
        stamp = {"source": source, "nvcc": NVCC_VERSION[source], "files": files}
        (root / _STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
        if not args.no_check:
            check(args.major, prefix)
        _log(f"CUDA {NVCC_VERSION[source]} ({source}) in {root}: {time.monotonic() - t0:.0f} s")
    else:
        installed(args.major, prefix)
    _emit(environment(args.major, prefix), args.github_env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
