#!/usr/bin/env python3
"""Install a pinned CUDA toolchain (nvcc + headers) into a prefix and print the build's env.

One pinned release per CUDA major, every file checked by sha256, so a wheel build (CI's
manylinux container or a developer's machine) compiles with exactly the toolchain its variant
names, whatever CUDA the host has:

  13  PyPI: nvidia-cuda-nvcc, -crt, nvidia-nvvm, -cuda-runtime (headers), -cuda-cccl, all of
      CUDA 13.0 Update 2 (nvcc 13.0.88). They unpack into ``nvidia/cu13/{bin,include,lib,nvvm}``.
  12  NVIDIA's redistributable archives of CUDA 12.9 Update 1 (nvcc 12.9.86), checked against
      the release's redistrib JSON. PyPI has no usable CUDA 12 compiler: nvidia-cuda-nvcc-cu12
      ships only ptxas, libnvvm, libdevice and the crt headers (no nvcc, cicc, cudafe++ or
      fatbinary), so it can serve JIT users but not a build.

Either way the result is laid out like a CUDA install (``targets/<arch>-linux/{include,lib}``
links and ``lib/libcudart.so``, which nvcc.profile and CMake's FindCUDAToolkit expect), nvcc is
test-compiled once, and the environment to build with is printed:

  eval "$(python tools/cuda_toolchain.py install 13 --prefix /tmp/cu13)"
  python tools/cuda_toolchain.py env 13 --prefix /tmp/cu13 --github-env   # append to $GITHUB_ENV

Standard library only (it runs in a bare build container before anything else is installed).
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
import urllib.request
from pathlib import Path

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

# --- CUDA 12: redistributable archives of CUDA 12.9.1 (the versions PyPI's *-cu12 12.9.x
# wheels carry too). Each archive's sha256 is read from the release's redistrib JSON, whose
# version fields must equal these pins.
REDIST_URL = "https://developer.download.nvidia.com/compute/cuda/redist/"  # or a mirror:
REDIST_ENV = "AOTKERNELS_CUDA_REDIST_URL"  # same layout; any scheme urllib opens (file:// too)
REDIST_12_RELEASE = "12.9.1"
REDIST_12 = {"cuda_nvcc": "12.9.86", "cuda_cudart": "12.9.79", "cuda_cccl": "12.9.27"}

NVCC_VERSION = {12: "12.9.86", 13: "13.0.88"}
_MACHINE = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


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


def _install_13(prefix: Path, python: str) -> None:
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


def _fetch(url: str) -> bytes:
    _log(f"downloading {url}")
    try:
        with urllib.request.urlopen(url, timeout=600) as r:
            data: bytes = r.read()
    except OSError as e:  # URLError, timeouts, refused connections
        raise SystemExit(
            f"cuda_toolchain: cannot download {url}: {e} (no route to NVIDIA's redist? "
            f"point {REDIST_ENV} at a mirror of it)"
        ) from None
    return data


def _install_12(prefix: Path) -> None:
    plat = "linux-x86_64" if _machine() == "x86_64" else "linux-sbsa"
    base = os.environ.get(REDIST_ENV) or REDIST_URL
    base = base if base.endswith("/") else base + "/"
    index = json.loads(_fetch(f"{base}redistrib_{REDIST_12_RELEASE}.json"))
    root = cuda_root(12, prefix)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    for comp, version in REDIST_12.items():
        entry = index[comp]
        if entry["version"] != version:
            raise SystemExit(
                f"cuda_toolchain: {comp} of CUDA {REDIST_12_RELEASE} is {entry['version']}, "
                f"pinned {version}"
            )
        data = _fetch(base + entry[plat]["relative_path"])
        digest = hashlib.sha256(data).hexdigest()
        if digest != entry[plat]["sha256"]:
            raise SystemExit(f"cuda_toolchain: {comp}: sha256 {digest} != {entry[plat]['sha256']}")
        with tempfile.TemporaryDirectory() as tmp:
            archive = Path(tmp) / "a.tar.xz"
            archive.write_bytes(data)
            with tarfile.open(archive) as tf:
                if hasattr(tarfile, "tar_filter"):  # 3.12, and 3.10.12+/3.11.4+ backports
                    tf.extractall(tmp, filter="tar")
                else:
                    tf.extractall(tmp)
            (top,) = (p for p in Path(tmp).iterdir() if p.is_dir())
            shutil.copytree(top, root, symlinks=True, dirs_exist_ok=True)


def _link(link: Path, target: str) -> None:
    if link.is_symlink() or link.exists():
        return
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


def lay_out(major: int, prefix: Path) -> Path:
    """Add the links a CUDA install has and the wheels/archives lack; return the root."""
    root = cuda_root(major, prefix)
    if (root / "lib64").is_dir() and not (root / "lib").exists():
        _link(root / "lib", "lib64")
    else:
        _link(root / "lib64", "lib")
    tdir = root / "targets" / _target_dir()
    _link(tdir / "include", "../../include")
    _link(tdir / "lib", "../../lib")
    # FindCUDAToolkit wants find_library(cudart); the wheels ship only the versioned soname.
    _link(root / "lib" / "libcudart.so", f"libcudart.so.{major}")
    if major == 13:  # relative symlink beside the site folder: a stable, short root path
        _link(prefix / "cuda", os.path.relpath(root, prefix))
    return root


def check(major: int, prefix: Path) -> None:
    """nvcc reports the pinned version and compiles a kernel using fp16/bf16 to a fatbin."""
    root = cuda_root(major, prefix)
    nvcc = root / "bin" / "nvcc"
    out = subprocess.run([str(nvcc), "--version"], check=True, capture_output=True, text=True)
    want = NVCC_VERSION[major]
    if f"V{want}" not in out.stdout:
        raise SystemExit(f"cuda_toolchain: {nvcc} is not {want}:\n{out.stdout}")
    src = (
        "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
        'extern "C" __global__ void k(__nv_bfloat16* y, const __half* x)'
        " { y[threadIdx.x] = __float2bfloat16(__half2float(x[threadIdx.x])); }\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / "k.cu"
        cu.write_text(src)
        subprocess.run(
            [str(nvcc), "-fatbin", "-arch=sm_75", "-o", str(Path(tmp) / "k.fatbin"), str(cu)],
            check=True,
            env={**os.environ, "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"},
        )
    _log(f"{nvcc}: CUDA {want}, test compile ok")


def environment(major: int, prefix: Path) -> dict[str, str]:
    root = cuda_root(major, prefix).resolve()
    return {
        "CUDA_HOME": str(root),
        "CUDA_PATH": str(root),
        "CUDAToolkit_ROOT": str(root),  # find_package(CUDAToolkit)
        "CUDACXX": str(root / "bin" / "nvcc"),  # CMake's CMAKE_CUDA_COMPILER
        "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "AOTKERNELS_CUDA_INCLUDE": str(root / "include"),
    }


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
            p.add_argument("--python", default=sys.executable, help="whose pip installs (13)")
            p.add_argument("--no-check", action="store_true", help="skip the test compile")
    args = ap.parse_args(argv)
    prefix = args.prefix.resolve()
    if args.command == "install":
        if args.major == 13:
            _install_13(prefix, args.python)
        else:
            _install_12(prefix)
        lay_out(args.major, prefix)
        if not args.no_check:
            check(args.major, prefix)
    elif not (cuda_root(args.major, prefix) / "bin" / "nvcc").is_file():
        raise SystemExit(f"cuda_toolchain: no CUDA {args.major} under {prefix}; run install")
    _emit(environment(args.major, prefix), args.github_env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
