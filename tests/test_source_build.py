"""A source build on a machine with no CUDA toolkit: the README's first command, as written, in a
fresh venv whose PATH holds no nvcc (only the system's compilers and tools). The build backend
must then take the pinned CUDA 13 compiler set from PyPI.

Slow (downloads the compiler wheels, builds one family for one target): deselect with
``-m "not slow"``. Needs PyPI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from helpers.builds import clean_env, run

pytestmark = pytest.mark.slow

SYSTEM_PATH = os.pathsep.join(["/usr/local/sbin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"])
# Where CMake and FindCUDAToolkit look for a toolkit besides PATH.
TOOLKIT_VARS = ("CUDACXX", "CUDAToolkit_ROOT", "CUDA_PATH", "CUDA_HOME", "CUDAHOSTCXX")


def test_readme_install_without_nvcc(tmp_path: Path) -> None:
    if shutil.which("nvcc", path=SYSTEM_PATH):
        pytest.skip(f"an nvcc is on the system PATH ({shutil.which('nvcc', path=SYSTEM_PATH)})")
    if not shutil.which("c++", path=SYSTEM_PATH):
        pytest.skip("no C++ compiler on the system PATH")
    src = tmp_path / "src"
    files = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, files):
        dest = src / name.decode()
        dest.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name.decode()).is_file():
            shutil.copy2(ROOT / name.decode(), dest)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in clean_env().items() if k not in TOOLKIT_VARS}
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{SYSTEM_PATH}",
        VIRTUAL_ENV=str(venv),
        # One family for one target keeps the build to a minute; the route is the same.
        AOTKERNELS_ARCHS="75",
        AOTKERNELS_FAMILIES="activation",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    env.pop("PYTHONPATH", None)
    line = (ROOT / "README.md").read_text().splitlines()[1]
    assert line.startswith("pip install"), line
    r = run(["bash", "-c", line], cwd=src, env=env, timeout=1800)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    assert "activation" in r.stdout and "ok" in r.stdout  # inspect's manifest check
    r = subprocess.run(
        [str(venv / "bin" / "aotkernels"), "inspect", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    manifest = json.loads(r.stdout)["manifest"]
    assert manifest["toolkit_full"] == "13.0.88"  # the PyPI set of tools/cuda_toolchain.py
