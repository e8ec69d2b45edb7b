"""A real restricted wheel build (AOTKERNELS_ARCHS="75;90;compute_75"): what the wheel holds, what
`aotkernels inspect` says about it, and no link to libcuda / libcudart.

Slow (a full nvcc + CMake build): deselect with ``-m "not slow"``. The build runs with
``--no-build-isolation`` so it needs the build requirements (scikit-build-core, nanobind) in
this Python, and uses a private build folder so it never disturbs ``build/<wheel tag>``.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from conftest import ROOT
from helpers.builds import clean_env, pip_wheel, run_cli

pytestmark = pytest.mark.slow

ARCHS = "75;90;compute_75"
# What the filter leaves of each family comes from the build plan (families declare their own
# targets: gemm and attention build sm_90a, not sm_90, and compute_80 PTX; quant needs sm_89+).
# The doctor's choice for each simulated device, per set of built targets:
CHOICES = {
    ("compute_75", "sm_75", "sm_90"): {
        "7.5": "sm_75", "8.6": "compute_75", "9.0": "sm_90", "10.0": "compute_75",
        "12.0": "compute_75",
    },
    ("sm_75",): {"7.5": "sm_75"},
    ("sm_90",): {"9.0": "sm_90"},
}  # fmt: skip


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = [m for m in ("scikit_build_core", "nanobind") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(
            f"pip wheel --no-build-isolation needs the build requirements in this Python: "
            f"pip install scikit-build-core nanobind (missing: {', '.join(missing)})"
        )
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: the wheel build needs the CUDA toolkit")
    tmp = tmp_path_factory.mktemp("wheel")
    out = tmp / "dist"
    return pip_wheel(ROOT, out, tmp / "build", clean_env(AOTKERNELS_ARCHS=ARCHS), ARCHS)


@pytest.fixture(scope="module")
def names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


@pytest.fixture(scope="module")
def unpacked(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("unpacked")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(dest)
    return dest


@pytest.fixture(scope="module")
def wheel_families(unpacked: Path) -> list[str]:
    """Families of the matrix the wheel was built from (no AOTKERNELS_FAMILIES: all of them)."""
    with (unpacked / "aotkernels" / "arch_matrix.toml").open("rb") as f:
        return list(tomllib.load(f)["families"])


@pytest.fixture(scope="module")
def manifest(unpacked: Path) -> dict[str, Any]:
    return json.loads((unpacked / "aotkernels" / "kernels" / "manifest.json").read_text())


@pytest.fixture(scope="module")
def plan(unpacked: Path, manifest: dict[str, Any]) -> Any:
    """The build plan of the wheel's own matrix under ARCHS: what each family must hold."""
    from aotkernels._build.matrix import load_matrix
    from aotkernels._build.plan import make_plan

    matrix = load_matrix(unpacked / "aotkernels" / "arch_matrix.toml", check_sources=False)
    toolkit = tuple(int(v) for v in manifest["toolkit"].split("."))
    return make_plan(matrix, toolkit, ARCHS)


def want_targets(plan: Any, family: str) -> list[str]:
    fp = plan.families[family]
    return sorted([t.name for t in fp.targets] + list(fp.ptx))


def test_wheel_contents(names: list[str], wheel_families: list[str]) -> None:
    assert {"activation", "gated"} <= set(wheel_families)
    cores = [n for n in names if re.fullmatch(r"aotkernels/_core[^/]*\.(so|abi3\.so)", n)]
    assert len(cores) == 1, names
    fatbins = {n for n in names if n.startswith("aotkernels/kernels/") and n.endswith(".fatbin")}
    assert fatbins == {f"aotkernels/kernels/{f}.fatbin" for f in wheel_families}
    for must in (
        "aotkernels/kernels/manifest.json",
        "aotkernels/arch_matrix.toml",
        "aotkernels/__init__.py",
        "aotkernels/cli.py",
        "aotkernels/fatbin.py",
        "aotkernels/manifest.py",
        "aotkernels/select.py",
        "aotkernels/_build/plan.py",
        "aotkernels/loader.py",
        "aotkernels/ops/__init__.py",
    ):
        assert must in names, must
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    meta = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert len(meta) == 1


def test_wheel_has_every_python_module(names: list[str]) -> None:
    src = ROOT / "python" / "aotkernels"
    tracked = subprocess.run(
        ["git", "ls-files", "--", "*.py"], cwd=src, capture_output=True, text=True, check=False
    )
    if tracked.returncode != 0 or not tracked.stdout.strip():
        pytest.skip("not a git checkout: cannot list the package's tracked modules")
    expected = {f"aotkernels/{p}" for p in tracked.stdout.split()}
    missing = sorted(p for p in expected if p not in names and (src / p[11:]).is_file())
    assert missing == []


def test_entry_point(wheel: Path, names: list[str]) -> None:
    with zipfile.ZipFile(wheel) as zf:
        (ep,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        text = zf.read(ep).decode()
    assert re.search(r"^aotkernels\s*=\s*aotkernels\.cli:main$", text, re.M), text


def test_inspect_wheel(wheel: Path, wheel_families: list[str], plan: Any, tmp_path: Path) -> None:
    r = run_cli("inspect", str(wheel), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr + r.stdout
    data = json.loads(r.stdout)
    assert sorted(data["families"]) == sorted(wheel_families)
    assert want_targets(plan, "activation") == ["compute_75", "sm_75", "sm_90"]
    for name, fam in data["families"].items():
        assert sorted(i["target"] for i in fam["images"]) == want_targets(plan, name), name
        assert fam["verified"] is True and fam["problems"] == [], (name, fam["problems"])
        assert all(i["compressed"] for i in fam["images"])
    assert data["manifest"]["archs"] == ARCHS
    assert data["wheel_bytes"] == wheel.stat().st_size


def test_manifest_records_the_filter(
    manifest: dict[str, Any], wheel_families: list[str], plan: Any
) -> None:
    assert manifest["archs"] == ARCHS
    assert manifest["families_filter"] is None
    assert {"sm_80", "sm_86", "sm_89", "sm_100", "sm_120", "compute_120"} <= set(
        dict(manifest["families"]["activation"]["skipped"])
    )
    for name in wheel_families:
        fam = manifest["families"][name]
        assert sorted(i["target"] for i in fam["images"]) == want_targets(plan, name)
        skipped = dict(fam["skipped"])
        assert skipped == dict(plan.families[name].skipped), name
        assert set(skipped.values()) == {"not in AOTKERNELS_ARCHS"}


def test_wheel_has_the_xla_extension(names: list[str]) -> None:
    """The wheel is built with --no-build-isolation by this Python: with jaxlib (and so its XLA
    FFI headers) importable here, the wheel must carry _xla."""
    if importlib.util.find_spec("jaxlib") is None:
        pytest.skip("jaxlib is not installed in this Python: the wheel is built without _xla")
    xla = [n for n in names if re.fullmatch(r"aotkernels/_xla[^/]*\.(so|abi3\.so)", n)]
    assert len(xla) == 1, names


@pytest.mark.parametrize("module", ["_core", "_xla"])
def test_extensions_do_not_link_cuda(unpacked: Path, module: str) -> None:
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) is not installed")
    found = list((unpacked / "aotkernels").glob(f"{module}*.so"))
    if not found and module == "_xla":
        pytest.skip("this wheel has no _xla (built without jaxlib)")
    (ext,) = found
    r = subprocess.run([readelf, "-d", str(ext)], capture_output=True, text=True, check=True)
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", r.stdout)
    assert needed, f"readelf found no NEEDED entries at all:\n{r.stdout}"
    bad = [n for n in needed if n.startswith(("libcuda.", "libcudart.", "libcuda-"))]
    assert bad == [], f"{module} links {bad}"


def _doctor(unpacked: Path, tmp_path: Path, arch: str) -> dict[str, Any]:
    env = clean_env(PYTHONPATH=str(unpacked), CUDA_VISIBLE_DEVICES="")
    r = run_cli("doctor", "--arch", arch, "--driver", "13.0", "--json", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["package"]["archs"] == ARCHS  # the unpacked wheel, not the installed package
    return data["devices"][0]["families"]


def test_restricted_wheel_image_choice(
    unpacked: Path, wheel_families: list[str], plan: Any, tmp_path: Path
) -> None:
    for arch in ("7.5", "8.6", "9.0", "10.0", "12.0"):
        fams = _doctor(unpacked, tmp_path, arch)
        assert sorted(fams) == sorted(wheel_families)
        for name, c in fams.items():
            expected = CHOICES[tuple(want_targets(plan, name))].get(arch)
            assert c["image"] == expected, (arch, name, c["reason"])
    fams = _doctor(unpacked, tmp_path, "7.0")
    for c in fams.values():
        assert c["image"] is None and c["error"] == "NoKernelImageError"
        assert "add [targets.sm_70]" in c["reason"]
