"""Loader checks that need no GPU: fatbin integrity against the manifest, the driver floor, and
devices the build cannot serve or can serve only through PTX, all before anything is loaded or
launched (docs/reliability.md: "Fatbin integrity", "The image each GPU runs, and driver
floors")."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import aotkernels as ak
from aotkernels import device, loader
from aotkernels.device import DeviceInfo
from helpers import variant


@pytest.fixture
def kernels_copy(tmp_path: Path, installed_kernels: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the installed kernels folder that the loader reads instead."""
    dst = tmp_path / "kernels"
    shutil.copytree(installed_kernels, dst)
    monkeypatch.setattr(loader, "KERNELS_DIR", dst)
    monkeypatch.setattr(loader, "_manifest", None)
    monkeypatch.setattr(loader, "_fatbins", {})
    return dst


def _family(kernels: Path, name: str = "activation") -> dict:  # type: ignore[type-arg]
    return json.loads((kernels / "manifest.json").read_text())["families"][name]


def test_intact_fatbin_passes_the_checksum(kernels_copy: Path) -> None:
    data = loader._fatbin_bytes("activation", _family(kernels_copy))
    assert data == (kernels_copy / "activation.fatbin").read_bytes()


@pytest.mark.parametrize("damage", ["truncated", "flipped", "missing"])
def test_damaged_fatbin_is_refused_naming_the_file(kernels_copy: Path, damage: str) -> None:
    path = kernels_copy / "activation.fatbin"
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":
        path.write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    else:
        path.unlink()
    with pytest.raises(ak.AotKernelsError, match=str(path)) as info:
        loader._fatbin_bytes("activation", _family(kernels_copy))
    expected = "cannot read" if damage == "missing" else "does not match the manifest"
    assert expected in str(info.value)


def test_missing_manifest_names_the_file(kernels_copy: Path) -> None:
    (kernels_copy / "manifest.json").unlink()
    with pytest.raises(ak.AotKernelsError, match=r"manifest\.json: missing"):
        loader.manifest()


def test_family_not_built_is_not_implemented(kernels_copy: Path) -> None:
    with pytest.raises(NotImplementedError, match="family 'no_such_family' is not in this build"):
        loader._family_manifest("no_such_family")


def test_driver_below_the_floor(kernels_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    floor = json.loads((kernels_copy / "manifest.json").read_text())["driver_floor"]
    old = variant.driver_below(variant.version(floor))  # 12.4 under cu13's 13.0, 11.8 under 12.0
    monkeypatch.setattr(device, "driver_version", lambda: old)
    want = rf"CUDA >= {re.escape(floor)}.*supports CUDA {old[0]}\.{old[1]}"
    with pytest.raises(ak.DriverTooOldError, match=want):
        loader._check_driver_floor()


def _simulated(cc: tuple[int, int]) -> DeviceInfo:
    return DeviceInfo(index=0, name="Simulated GPU", cc=cc, sm_count=1, context=0)


def test_unserved_device_fails_before_loading(
    kernels_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cc the wheel cannot serve (drop the PTX so 13.0 has nothing) -> NoKernelImageError."""
    man = json.loads((kernels_copy / "manifest.json").read_text())
    fam = man["families"]["activation"]
    fam["images"] = [i for i in fam["images"] if i["kind"] == "cubin"]
    (kernels_copy / "manifest.json").write_text(json.dumps(man))
    monkeypatch.setattr(device, "driver_version", lambda: (13, 0))
    with pytest.raises(ak.NoKernelImageError, match=r"device 0 \(Simulated GPU\).*13\.0"):
        loader.choice_for("activation", _simulated((13, 0)))
    assert loader.choice_for("activation", _simulated((9, 0))).target == "sm_90"


def test_ptx_only_device_under_old_driver(
    kernels_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only PTX serves a 13.0 part; a driver that passes the floor but cannot JIT the PTX's
    ISA gets DriverTooOldError naming both versions."""
    man = json.loads((kernels_copy / "manifest.json").read_text())
    for img in man["families"]["activation"]["images"]:
        if img["kind"] == "ptx":
            img["ptx_isa"] = "9.9"  # newer than any 13.0 driver JITs
    (kernels_copy / "manifest.json").write_text(json.dumps(man))
    monkeypatch.setattr(device, "driver_version", lambda: (13, 0))
    with pytest.raises(ak.DriverTooOldError, match=r"ISA 9\.9.*CUDA 13\.0.*ISA 9\.0"):
        loader.choice_for("activation", _simulated((13, 0)))
